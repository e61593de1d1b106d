"""Ollama's request bodies, as its clients send them, and the time stamps and durations of its answers.

Bodies keep their undeclared fields (judged by requests.py: fields of Ollama's API this server does not honour
are a 400, others are ignored, as on the OpenAI routes). Every field is optional and nullable; what each needs
is checked where it is used, so the 400 can name the field.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict

STREAM_MEDIA_TYPE = "application/x-ndjson"
NANOS = 1_000_000_000


# A duration ("5m") or seconds. Python's JSON parser reads NaN and Infinity: they are a 400 naming the field, as
# a non-finite number is on every other route (accepted: the model stays loaded while the server runs).
def _finite(value: str | int | float | None) -> str | int | float | None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f'must be a duration such as "5m" or a finite number of seconds, got {value}')
    return value


KeepAlive = Annotated[str | int | float | None, AfterValidator(_finite)]


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class Message(_Body):
    role: str
    content: str | None = None
    images: list[Any] | None = None
    thinking: str | None = None
    tool_calls: list[dict] | None = None
    tool_name: str | None = None


class _GenerationBody(_Body):
    model: str | None = None
    stream: bool | None = None  # Ollama streams unless told not to
    format: str | dict | None = None  # "json", or a JSON schema
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive = None
    think: bool | str | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


class ChatBody(_GenerationBody):
    messages: list[Message] | None = None
    tools: list[Any] | None = None


class GenerateBody(_GenerationBody):
    prompt: str | None = None
    system: str | None = None
    raw: bool | None = None
    context: list[int] | None = None  # token ids a previous answer returned: the conversation so far
    suffix: str | None = None
    template: str | None = None
    images: list[Any] | None = None


class EmbedBody(_Body):
    model: str | None = None
    input: str | list[str] | None = None
    truncate: bool | None = None  # Ollama's default: cut an input to the context (false: a 400)
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive = None
    dimensions: int | None = None


class LegacyEmbeddingsBody(_Body):
    """/api/embeddings, Ollama's older route: one prompt, one vector, not normalized."""

    model: str | None = None
    prompt: str | None = None
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive = None


class ShowBody(_Body):
    model: str | None = None
    name: str | None = None  # the older spelling of model
    verbose: bool | None = None


def created_at() -> str:
    """Now, in UTC, as Ollama writes its time stamps."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def nanos(seconds: float) -> int:
    return max(0, round(seconds * NANOS))
