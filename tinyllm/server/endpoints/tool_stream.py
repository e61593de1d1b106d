"""One streamed choice's text split into content deltas and, when it ends, tool_calls deltas.

Prose streams as it comes. Text that may be the start of a call (a suffix that begins the format's opening
text, or for formats whose calls may stand bare, an answer that opens with '{' or '[') is held back, as is
trailing whitespace (the whole answer's content ends without it). When the choice ends, the held text is
parsed once, with the same parser as a whole answer, so the streamed content and calls join up to exactly
what stream=false returns.
"""

from __future__ import annotations

from ...text.tool_calls import ParsedOutput, call_start
from ..checks.tools import ToolRequest, new_call_id
from ..wire.protocol import FunctionDelta, ToolCallDelta


def _partial_open(text: str, opening: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of `opening`."""
    for size in range(min(len(opening) - 1, len(text)), 0, -1):
        if opening.startswith(text[-size:]):
            return size
    return 0


class ToolCallStream:
    def __init__(self, tools: ToolRequest):
        self.tools = tools
        self.text = ""
        self.sent = 0  # characters of text already sent as content
        self.in_call = tools.is_forced  # a forced answer is one call from its first character

    def feed(self, piece: str) -> str:
        """The content that may be sent now, given the next piece of text."""
        self.text += piece
        if self.in_call:
            return ""
        fmt, text = self.tools.fmt, self.text
        start = call_start(text, fmt)
        if start is not None:
            self.in_call = True
            safe = len(text[:start].rstrip())
        elif fmt.bare and not text.strip():
            safe = 0  # nothing but whitespace yet: a bare call may still begin
        else:
            safe = len(text) - _partial_open(text, fmt.open) if fmt.open else len(text)
            safe = len(text[:safe].rstrip())
        return self._release(max(safe, self.sent))

    def _release(self, upto: int) -> str:
        out, self.sent = self.text[self.sent : upto], upto
        return out

    def finish(self) -> tuple[str, ParsedOutput]:
        """The content still to send, and the parsed answer."""
        parsed = self.tools.parse(self.text)
        if parsed.calls:
            return parsed.content[self.sent :], parsed
        return self._release(len(self.text)), parsed


def call_deltas(parsed: ParsedOutput) -> list[list[ToolCallDelta]]:
    """Per call, as OpenAI streams them: its id and name first, then its arguments."""
    out = []
    for i, call in enumerate(parsed.calls):
        head = ToolCallDelta(
            index=i, id=new_call_id(), type="function", function=FunctionDelta(name=call.name, arguments="")
        )
        out.append([head])
        out.append([ToolCallDelta(index=i, function=FunctionDelta(arguments=call.arguments))])
    return out
