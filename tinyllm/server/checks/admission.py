"""Cheap checks that run before a request costs anything: sizes against the context before tokenizing,
stop strings against their caps, and prompt + max_tokens against the context after.

A prompt's characters are bounded without tokenizing it: every token stands for at most
`max_token_chars` characters (the longest vocabulary entry), so a text longer than
context_length x max_token_chars cannot fit and is refused before the tokenizer sees it.
Lone UTF-16 surrogates (JSON accepts "\\ud800") become U+FFFD before tokenizing: no encoding can hold them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ...engine.prompt import NoRoom, check_room
from ..wire.errors import APIError
from ..wire.limits import MAX_STOP_CHARS, MAX_STOP_STRINGS

CONTEXT_CODE = "context_length_exceeded"


def context_error(message: str, param: str | None) -> APIError:
    return APIError(400, message, param=param, code=CONTEXT_CODE)


def replace_lone_surrogates(text: str) -> str:
    """text with every unpaired surrogate code point replaced by U+FFFD (pairs become their character)."""
    try:
        text.encode("utf-8")
        return text  # the common case: nothing to replace
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def max_token_chars(tokenizer) -> int:
    """The most characters one token can stand for: the longest vocabulary entry (a byte-level entry has
    one character per byte, never fewer than the text it decodes to)."""
    hf = getattr(tokenizer, "hf", None)
    vocab = hf.get_vocab(with_added_tokens=True) if hf is not None else {}
    return max((len(piece) for piece in vocab), default=64)


@dataclass(frozen=True)
class PromptLimits:
    context_length: int
    max_token_chars: int

    @property
    def max_chars(self) -> int:
        return self.context_length * self.max_token_chars

    def check_text(self, num_chars: int, param: str) -> None:
        if num_chars > self.max_chars:
            raise context_error(
                f"{param} has {num_chars} characters, more than any prompt within the context length of "
                f"{self.context_length} tokens can have ({self.max_chars})",
                param,
            )

    def check_ids(self, num_ids: int, param: str) -> None:
        self.check_room(num_ids, None, param)

    def check_message_count(self, num_messages: int) -> None:
        if num_messages > self.context_length:
            raise context_error(
                f"messages has {num_messages} entries, more than the context length of "
                f"{self.context_length} tokens can hold",
                "messages",
            )

    def check_messages(self, messages: list, tools: list | None = None) -> None:
        """Messages (and the tools the template will render with them) against the context, before rendering:
        a tool's JSON is counted as text, since templates write it out."""
        self.check_message_count(len(messages))
        chars = sum(_message_chars(m) for m in messages)
        if not tools:
            self.check_text(chars, "messages")
            return
        tools_chars = len(json.dumps(tools, ensure_ascii=False))
        if chars + tools_chars > self.max_chars:
            raise context_error(
                f"messages and tools have {chars + tools_chars} characters together ({tools_chars} of them the "
                f"tools' JSON), more than any prompt within the context length of {self.context_length} tokens "
                f"can have ({self.max_chars})",
                "messages" if chars > self.max_chars else "tools",
            )

    def check_room(
        self, num_prompt: int, max_tokens: int | None, param: str, max_tokens_param: str = "max_tokens"
    ) -> None:
        """The prompt must leave room for max_tokens (or at least one token) in the context; `max_tokens_param`
        is the request field that set it (max_completion_tokens, max_output_tokens)."""
        room_or_400(num_prompt, self.context_length, param, max_tokens=max_tokens, max_tokens_field=max_tokens_param)


def room_or_400(prompt_len: int, context_len: int, field: str, **rule) -> None:
    """The context rule (engine/prompt.py), broken as a 400 `context_length_exceeded` naming the field to blame."""
    try:
        check_room(prompt_len, context_len, field, **rule)
    except NoRoom as exc:
        raise context_error(str(exc), exc.field) from None


def _message_chars(message) -> int:
    """The characters of a message's text, and of the tool calls an assistant message carries."""
    calls = (message.model_extra or {}).get("tool_calls")
    return _content_chars(message.content) + (len(json.dumps(calls, ensure_ascii=False)) if calls else 0)


def _content_chars(content) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    return sum(len(p.text or "") for p in content)


def check_stops(stop) -> tuple[str, ...]:
    """The stop strings, within the caps (a 400 naming the limit otherwise)."""
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > MAX_STOP_STRINGS:
        raise APIError(400, f"stop has {len(stops)} strings, more than the limit of {MAX_STOP_STRINGS}", param="stop")
    long = next((s for s in stops if len(s) > MAX_STOP_CHARS), None)
    if long is not None:
        raise APIError(
            400, f"a stop string has {len(long)} characters, more than the limit of {MAX_STOP_CHARS}", param="stop"
        )
    return tuple(replace_lone_surrogates(s) for s in stops)
