"""Reasoning output: which models think before they answer, and the generated text split into its reasoning and
its answer as it streams.

A reasoning format is a row of data: its open and close markers. A model reasons in a format when its chat
template reads the format's switch variable (Qwen3's `enable_thinking`) and its vocabulary holds both markers as
tokens. Qwen3's output looks like:

    <think>\\n  reasoning …  \\n</think>\\n\\n  answer …
    └ open ┘    └ reasoning ┘   └ close ┘      └ answer ┘

The newline after the open marker, before the close marker and after it belong to the format, not to either part.
A reply that does not open with the marker (after leading whitespace) is all answer; a reply cut inside the span
is all reasoning. A prompt that already opened the span (a template that writes `<think>\\n` itself) starts the
splitter inside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from ..errors import TinyLLMError


@dataclass(frozen=True)
class ReasoningFormat:
    """One way models mark their reasoning: the markers and the template variable that turns it on or off."""

    name: str
    open: str
    close: str
    switch: str  # the chat template's variable

    def __post_init__(self):
        if not self.open or not self.close:
            raise ValueError(f"reasoning format {self.name!r} needs two markers, got {self.open!r}, {self.close!r}")


# One row per format; gpt-oss's harmony channels would be another row with a splitter of their own.
FORMATS = (ReasoningFormat("think", "<think>", "</think>", "enable_thinking"),)


def reasoning_format(template: str | None, token_id) -> ReasoningFormat | None:
    """The format a model reasons in: its template reads the switch and `token_id(text)` finds both markers."""
    if not template:
        return None
    for fmt in FORMATS:
        if re.search(rf"\b{fmt.switch}\b", template) and None not in (token_id(fmt.open), token_id(fmt.close)):
            return fmt
    return None


def opens_in_prompt(fmt: ReasoningFormat, prompt_text: str) -> bool:
    """Whether the prompt ends inside an open span (its last marker is the open one), so the reply starts there."""
    opened, closed = prompt_text.rfind(fmt.open), prompt_text.rfind(fmt.close)
    return opened > closed and not prompt_text[opened + len(fmt.open) :].strip()


class Split(NamedTuple):
    """What one push made final: a piece of reasoning and a piece of answer (either may be "")."""

    reasoning: str
    answer: str


class Part(Enum):
    START = "start"  # nothing decided yet: the reply may still open the span
    REASONING = "reasoning"
    ANSWER_START = "answer_start"  # just after the close marker: its newlines are the format's
    ANSWER = "answer"


class ReasoningSplitter:
    """Splits streamed text into reasoning and answer, never showing a marker or a part of one.

    Terms:
    - held: pushed text not yet shown. At START, the whitespace and marker prefix read so far; in REASONING, the
      longest tail that is newlines followed by a proper prefix of the close marker (they may turn out to be the
      format's newline and marker); at ANSWER_START, the newlines after the close marker.
    - opened / closed: whether the reply (or the prompt) opened the span, and whether it was closed.
    Every piece shown is final; the pieces plus flush() are the reply less its markers and their newlines.
    """

    def __init__(self, fmt: ReasoningFormat, in_reasoning: bool = False):
        self.fmt = fmt
        self.part = Part.REASONING if in_reasoning else Part.START
        self.opened = in_reasoning
        self._held = ""
        self._reasoning_started = False  # the newline after the open marker is dropped once

    @property
    def in_reasoning(self) -> bool:
        return self.part is Part.REASONING

    @property
    def closed(self) -> bool:
        """The span was opened and closed: what follows is answer."""
        return self.opened and self.part in (Part.ANSWER_START, Part.ANSWER)

    def push(self, text: str) -> Split:
        reasoning, answer = [], []
        text = self._held + text
        self._held = ""
        while text:
            text = self._step(text, reasoning, answer)
        return Split("".join(reasoning), "".join(answer))

    def _step(self, text: str, reasoning: list, answer: list) -> str:
        """Consume text from the current part; return what is left for the next part ("" when all is used)."""
        if self.part is Part.START:
            body = text.lstrip()
            if body.startswith(self.fmt.open):
                self.part, self.opened = Part.REASONING, True
                return body[len(self.fmt.open) :]
            if self.fmt.open.startswith(body):  # may still become the marker
                self._held = text
                return ""
            self.part = Part.ANSWER
            return text
        if self.part is Part.REASONING:
            if not self._reasoning_started:
                text = text.lstrip("\n")
                if not text:
                    return ""
                self._reasoning_started = True
            at = text.find(self.fmt.close)
            if at >= 0:
                reasoning.append(text[:at].rstrip("\n"))
                self.part = Part.ANSWER_START
                return text[at + len(self.fmt.close) :]
            keep = self._undecided_tail(text)
            reasoning.append(text[: len(text) - keep])
            self._held = text[len(text) - keep :]
            return ""
        if self.part is Part.ANSWER_START:
            body = text.lstrip("\n")
            if not body:
                self._held = text
                return ""
            self.part = Part.ANSWER
            return body
        answer.append(text)
        return ""

    def _undecided_tail(self, text: str) -> int:
        """The length of the longest tail that is newlines and then a proper prefix of the close marker."""
        close = self.fmt.close
        for n in range(min(len(close) - 1, len(text)), -1, -1):
            if close.startswith(text[len(text) - n :]):
                head = text[: len(text) - n]
                return n + len(head) - len(head.rstrip("\n"))
        return 0

    def flush(self) -> Split:
        """At the end of the reply: what was held is text of the part it was in (an unfinished marker is text)."""
        held, self._held = self._held, ""
        if self.part is Part.REASONING:
            return Split(held if self._reasoning_started else "", "")
        if self.part is Part.START:
            return Split("", held)
        return Split("", "")


def thinking_variables(fmt: ReasoningFormat | None, thinking: bool | None) -> dict:
    """The chat template's variables for a caller's `thinking` (None: the template's default)."""
    if thinking and fmt is None:
        raise TinyLLMError("thinking=True asks for reasoning, but this model does not reason; leave it out")
    return {} if fmt is None or thinking is None else {fmt.switch: thinking}
