"""Whether a chat request's model thinks before it answers: vLLM's `chat_template_kwargs: {"enable_thinking": ...}`
and OpenAI's `reasoning_effort` ("none" turns thinking off, any other effort on), checked against the model.

A model that does not reason refuses a request that asks for thinking and ignores one that turns it off. A model
that reasons follows the request, else its template's default (Qwen3's: on). A constrained output (a schema, a
forced tool call) constrains the whole reply, so it turns thinking off unless the request turned it on, which is
refused: the grammar would forbid the think span.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...text.reasoning import ReasoningFormat
from ..wire.client_text import clip
from ..wire.errors import bad_request

EFFORTS = ("none", "minimal", "low", "medium", "high")


@dataclass(frozen=True)
class Thinking:
    """A request's choice: `enabled` None leaves it to the template; `variables` go to the template."""

    fmt: ReasoningFormat | None
    enabled: bool | None

    @property
    def variables(self) -> dict:
        return {} if self.fmt is None or self.enabled is None else {self.fmt.switch: self.enabled}

    @property
    def reasons(self) -> bool:
        """The model reasons: its answers' think span is set apart (SamplingParams.reasoning)."""
        return self.fmt is not None


def _asked(extra: dict) -> tuple[bool | None, str | None]:
    """(enable_thinking as the request set it, the field that set it)."""
    kwargs = extra.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict) or set(kwargs) - {"enable_thinking"}:
            raise bad_request(
                f"chat_template_kwargs is {clip(repr(kwargs))}; only {{'enable_thinking': true|false}} is supported",
                "chat_template_kwargs",
            )
        enabled = kwargs.get("enable_thinking")
        if enabled is not None and not isinstance(enabled, bool):
            message = f"enable_thinking is {clip(repr(enabled))}, expected true or false"
            raise bad_request(message, "chat_template_kwargs")
        if enabled is not None:
            return enabled, "chat_template_kwargs"
    effort = extra.get("reasoning_effort")
    if effort is None:
        return None, None
    if effort not in EFFORTS:
        message = f"reasoning_effort is {clip(repr(effort))}, expected one of {', '.join(EFFORTS)}"
        raise bad_request(message, "reasoning_effort")
    return effort != "none", "reasoning_effort"


def thinking_of(extra: dict, fmt: ReasoningFormat | None, constrained: bool) -> Thinking:
    """The request's thinking for a model reasoning in `fmt` (None: it does not reason); a 400 for what is wrong."""
    enabled, field = _asked(extra)
    if fmt is None:
        if enabled:
            raise bad_request(f"{field} asks for thinking, but this model does not reason; leave it out", field)
        return Thinking(None, None)
    if constrained:
        if enabled:
            raise bad_request(
                f"{field} turns thinking on, which a structured output or forced tool call does not allow; "
                "turn it off or leave it out",
                field,
            )
        return Thinking(fmt, False)
    return Thinking(fmt, enabled)
