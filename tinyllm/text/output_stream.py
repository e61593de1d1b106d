"""OutputStream: a request's generated ids turned into final text, one accepted token at a time.

token -> incremental detokenizer -> [reasoning splitter ->] stop matcher -> text that is safe to send. EOS / stop
ids are decided before a token gets here; a stop string ends the stream with the text cut before it. With a
splitter (a reasoning model's request), the think span's text is set aside as reasoning and only the answer meets
the stop strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..outputs import TokenLogprob
from .detokenizer import IncrementalDecoder
from .reasoning import ReasoningSplitter
from .stop import StopMatcher


@dataclass
class OutputStream:
    decoder: IncrementalDecoder
    matcher: StopMatcher
    ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    stopped: bool = False  # a stop string was found
    splitter: ReasoningSplitter | None = None
    reasoning_pieces: list[str] = field(default_factory=list)
    num_reasoning_tokens: int = 0  # tokens generated inside the think span (the ones that open and close it too)
    unsent_reasoning: str = ""  # reasoning final since take_reasoning() last ran

    @classmethod
    def create(cls, tok, stop_strings, splitter: ReasoningSplitter | None = None) -> OutputStream:
        return cls(IncrementalDecoder(tok), StopMatcher(stop_strings), splitter=splitter)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def reasoning(self) -> str | None:
        """The think span's text; None without a splitter or when the reply had none."""
        return "".join(self.reasoning_pieces) or None

    def take_reasoning(self) -> str:
        """The reasoning that became final since the last call."""
        text, self.unsent_reasoning = self.unsent_reasoning, ""
        return text

    def _answer(self, text: str, at_end: bool = False) -> str:
        """Set the reasoning in `text` aside; return its answer part (all of it without a splitter)."""
        if self.splitter is None:
            return text
        split = self.splitter.push(text)
        if at_end:
            tail = self.splitter.flush()
            split = split._replace(reasoning=split.reasoning + tail.reasoning, answer=split.answer + tail.answer)
        if split.reasoning:
            self.reasoning_pieces.append(split.reasoning)
            self.unsent_reasoning += split.reasoning
        return split.answer

    def add(self, token: int, logprob: TokenLogprob) -> str:
        """Accept a generated token; return the text that became final (sets `stopped` on a stop string)."""
        self.ids.append(token)
        self.logprobs.append(logprob)
        was_closed = self.splitter is not None and self.splitter.closed
        answer = self._answer(self.decoder.push(token))
        if self.splitter is not None and self.splitter.opened and not was_closed:
            self.num_reasoning_tokens += 1
        out = self.matcher.push(answer)
        self.stopped = out.stopped
        if out.text:
            self.pieces.append(out.text)
        return out.text

    def finish(self) -> str:
        """At the end (EOS or length): the decoder's cut-off tail, then the text held back for stop strings."""
        if self.stopped:
            return ""
        out = self.matcher.push(self._answer(self.decoder.flush(), at_end=True))
        tail = out.text if out.stopped else out.text + self.matcher.flush()
        self.stopped = out.stopped
        if tail:
            self.pieces.append(tail)
        return tail
