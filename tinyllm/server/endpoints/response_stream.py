"""A reasoning model's /v1/responses stream: its reasoning item's text as it comes, then its message's.

    reasoning item (output 0): added → reasoning_text.delta … → reasoning_text.done → done
    message (output 1, or 0 with no thinking): added → content_part.added → output_text.delta … → (closing_events)

The reasoning item opens with the first reasoning text and closes when the answer begins (or at the end); the
message opens with the first answer text, or at the end when there is none.
"""

from __future__ import annotations

from ...text.reasoning import Split
from ..wire.response_shapes import (
    ResponseMeta,
    delta_event,
    message_start,
    reasoning_delta,
    reasoning_end,
    reasoning_start,
)


class ReasoningItems:
    def __init__(self, meta: ResponseMeta):
        self.meta = meta
        self.reasoning: list[str] = []
        self.reasoning_open = False
        self.message_index: int | None = None  # the message's output index once it opened

    def on_split(self, split: Split) -> list[str]:
        events = []
        if split.reasoning and self.message_index is None:
            if not self.reasoning_open:
                events.append(reasoning_start(self.meta))
                self.reasoning_open = True
            self.reasoning.append(split.reasoning)
            events.append(reasoning_delta(self.meta, split.reasoning))
        if split.answer:
            events += self._open_message()
            events.append(delta_event(self.meta, split.answer, self.message_index))
        return events

    def finish(self, status: str) -> list[str]:
        """Before closing_events: the reasoning closed (with `status`) and the message open."""
        return self._open_message(status)

    def _open_message(self, status: str = "completed") -> list[str]:
        if self.message_index is not None:
            return []
        events = reasoning_end(self.meta, "".join(self.reasoning), status) if self.reasoning_open else []
        self.message_index = 1 if self.reasoning_open else 0
        return [*events, *message_start(self.meta, self.message_index)]
