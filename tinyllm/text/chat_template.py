"""Render a model's own jinja2 chat template the way Hugging Face transformers does.

Templates come from model files, so they are untrusted code: they run in jinja2's immutable
sandbox. The environment settings and helpers (trim_blocks, lstrip_blocks, loop controls,
`raise_exception`, a `tojson` that keeps non-ASCII text, `strftime_now`) are the ones templates
are written against; without them the same template renders different whitespace or fails.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

from ..errors import TinyLLMError


def _raise_exception(message: str):
    import jinja2

    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    # jinja2's built-in tojson escapes HTML characters, which would change the prompt text.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=16)
def compile_template(source: str):
    """The template compiled once; TinyLLMError if it is not valid jinja2."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise TinyLLMError(
            f"the model's chat template is not valid jinja2 ({exc}), expected a template that compiles"
        ) from None


def check_messages(messages: object) -> list[dict]:
    """TinyLLMError unless messages is a list of {"role": str, "content": str} dicts."""
    if not isinstance(messages, list):
        raise TinyLLMError(
            f'messages is a {type(messages).__name__}, expected a list of {{"role": str, "content": str}} dicts'
        )
    for i, message in enumerate(messages):
        ok = (
            isinstance(message, dict)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        )
        if not ok:
            raise TinyLLMError(
                f'messages[{i}] is {message!r}, expected a dict with a string "role" and a string "content"'
            )
    return messages


def check_tools(tools: object) -> list[dict] | None:
    """None, or a list of tool descriptions (JSON-schema dicts, as templates expect them)."""
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise TinyLLMError(f"tools must be a list of dicts (JSON schemas of functions), got {tools!r:.80}")
    return tools


def render_chat(
    source: str,
    messages: list[dict],
    add_generation_prompt: bool,
    special_tokens: dict[str, str],
    tools: list[dict] | None = None,
) -> str:
    """The prompt text; special_tokens (bos_token, eos_token, ...) are visible to the template, and so are
    the tools a caller offers (ChatML-with-tools templates list them in the system turn)."""
    import jinja2

    template = compile_template(source)
    check_messages(messages)
    tools = check_tools(tools)
    # Copies, so a template can never change the caller's messages.
    plain = [dict(m) for m in messages]
    try:
        # tools/documents are None when absent, as in transformers, so `is none` tests in templates agree.
        return template.render(
            messages=plain, tools=tools, documents=None, add_generation_prompt=add_generation_prompt, **special_tokens
        )
    except jinja2.exceptions.TemplateError as exc:
        # A template's raise_exception reports a conversation it does not accept.
        raise TinyLLMError(
            f"the chat template rejected these messages ({exc}), expected a conversation the model's template accepts"
        ) from None
