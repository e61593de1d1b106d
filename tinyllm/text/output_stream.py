"""OutputStream: a request's generated ids turned into final text, one accepted token at a time.

token -> incremental detokenizer -> stop matcher -> text that is safe to send. EOS / stop ids are decided
before a token gets here; a stop string ends the stream with the text cut before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..outputs import TokenLogprob
from .detokenizer import IncrementalDecoder
from .stop import StopMatcher


@dataclass
class OutputStream:
    decoder: IncrementalDecoder
    matcher: StopMatcher
    ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    stopped: bool = False  # a stop string was found

    @classmethod
    def create(cls, tok, stop_strings) -> OutputStream:
        return cls(IncrementalDecoder(tok), StopMatcher(stop_strings))

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def add(self, token: int, logprob: TokenLogprob) -> str:
        """Accept a generated token; return the text that became final (sets `stopped` on a stop string)."""
        self.ids.append(token)
        self.logprobs.append(logprob)
        out = self.matcher.push(self.decoder.push(token))
        self.stopped = out.stopped
        if out.text:
            self.pieces.append(out.text)
        return out.text

    def finish(self) -> str:
        """At the end (EOS or length): the decoder's cut-off tail, then the text held back for stop strings."""
        if self.stopped:
            return ""
        out = self.matcher.push(self.decoder.flush())
        tail = out.text if out.stopped else out.text + self.matcher.flush()
        self.stopped = out.stopped
        if tail:
            self.pieces.append(tail)
        return tail
