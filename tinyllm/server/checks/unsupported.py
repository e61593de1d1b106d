"""Request fields this server does not honour: a 400 naming the field, never a silent default.

A client that sends `functions` or `audio` relies on the answer obeying
it; answering 200 with ordinary prose would look right and be wrong. Each entry below names a field of
OpenAI's API (or a well-known extra of other OpenAI-compatible servers that changes the answer) and the
values that mean "nothing asked" and are therefore accepted. Fields that change nothing about the
answer (`user`, `metadata`, `prompt_cache_key`, ...) are accepted and listed in the README, as are
unknown extras, which are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..wire.errors import bad_request


@dataclass(frozen=True)
class Unsupported:
    """A field tinyllm does not honour; `is_neutral(value, body)` is True for the values that ask for
    nothing (null always does, since clients send null for "not set")."""

    name: str
    is_neutral: Callable[[Any, dict], bool]
    accepted: str  # what may be sent instead, for the error message


def is_one_of(*neutral: Any) -> Callable[[Any, dict], bool]:
    # type as well as value: True == 1 and False == 0 in Python, but not in a request.
    return lambda value, _: any(type(value) is type(n) and value == n for n in neutral)


def _never(value: Any, _: dict) -> bool:
    return False


def _best_of_is_n(value: Any, body: dict) -> bool:
    n = body.get("n")
    return type(value) is int and value == (n if type(n) is int else 1)


def field_table(*entries: tuple[str, Callable, str]) -> dict[str, Unsupported]:
    return {name: Unsupported(name, ok, accepted) for name, ok, accepted in entries}


# Both endpoints: OpenAI fields, then other servers' extras that would change the answer.
_COMMON = field_table(
    ("store", is_one_of(False), "false"),
    ("service_tier", is_one_of("auto", "default"), '"auto" or "default"'),
    ("prompt_cache_retention", is_one_of("in-memory", "in_memory"), '"in-memory"'),
    # structured outputs (guided_*, structured_outputs, json_schema, grammar) are read by structured.py
    ("guided_decoding_backend", is_one_of("auto", "guidance", "llguidance"), '"auto" or "guidance"'),
    ("regex", _never, "nothing (send guided_regex)"),
    ("use_beam_search", is_one_of(False), "false"),
    ("include_stop_str_in_output", is_one_of(False), "false"),
    ("skip_special_tokens", is_one_of(True), "true"),
    ("spaces_between_special_tokens", is_one_of(True), "true"),
    ("allowed_token_ids", _never, "nothing"),
    ("bad_words", is_one_of([]), "an empty list"),
    ("logits_processors", is_one_of([]), "an empty list"),
    ("truncate_prompt_tokens", _never, "nothing"),
    ("return_tokens_as_token_ids", is_one_of(False), "false"),
    ("n_probs", is_one_of(0), "0"),
)

CHAT_FIELDS = {
    **_COMMON,
    **field_table(
        ("functions", is_one_of([]), "an empty list"),
        ("function_call", is_one_of("none"), '"none"'),
        ("audio", _never, "nothing"),
        ("modalities", is_one_of(["text"]), '["text"]'),
        ("prediction", _never, "nothing"),
        ("verbosity", _never, "nothing"),
        ("web_search_options", _never, "nothing"),
        ("echo", is_one_of(False), "false"),
        ("prompt_logprobs", _never, "nothing (it is a /v1/completions field here)"),
        ("add_generation_prompt", is_one_of(True), "true"),
        ("continue_final_message", is_one_of(False), "false"),
        ("chat_template", _never, "nothing (the model's own template is used)"),
        ("documents", is_one_of([]), "an empty list"),
    ),
}

COMPLETION_FIELDS = {
    **_COMMON,
    **field_table(
        ("best_of", _best_of_is_n, "a value equal to n"),
        ("suffix", is_one_of(""), "an empty string"),
    ),
}

MESSAGE_FIELDS = field_table(
    ("function_call", _never, "nothing"),
    ("audio", _never, "nothing"),
)


def _first_unsupported(sent: dict, table: dict[str, Unsupported], body: dict) -> Unsupported | None:
    for name, value in sent.items():
        entry = table.get(name)
        if entry is not None and value is not None and not entry.is_neutral(value, body):
            return entry
    return None


def check_supported(body, table: dict[str, Unsupported]) -> None:
    """Raise a 400 for the first field of a parsed request body that asks for something this server does
    not do, then the same for each chat message. Undeclared fields come from pydantic's extras."""
    sent = {**(body.model_extra or {}), **{k: getattr(body, k) for k in type(body).model_fields}}
    entry = _first_unsupported(sent, table, sent)
    if entry is not None:
        raise bad_request(
            f"{entry.name} is not supported by this server (it would be ignored); "
            f"send {entry.accepted} or leave it out",
            entry.name,
        )
    # Only a declared messages field holds validated messages: in another request (a completion) it is an extra.
    messages = body.messages if "messages" in type(body).model_fields else None
    for i, message in enumerate(messages or ()):
        extra = message.model_extra or {}
        entry = _first_unsupported(extra, MESSAGE_FIELDS, extra)
        if entry is not None:
            raise bad_request(
                f"messages[{i}].{entry.name} is not supported by this server; send {entry.accepted} or leave it out",
                "messages",
            )
