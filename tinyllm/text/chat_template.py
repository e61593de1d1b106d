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
from .tool_calls import detect_format
from .tool_prompt import for_plain_template, for_tool_template


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


def _message_problem(message: object) -> str | None:
    """What is wrong with one message, or None. Content is text; an assistant message that calls tools may
    have none, and its tool_calls are OpenAI's [{"id", "type": "function", "function": {"name", "arguments"}}]."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        return 'expected a dict with a string "role" and a string "content"'
    calls = message.get("tool_calls")
    if calls is not None:
        if message["role"] != "assistant" or not isinstance(calls, list):
            return "expected tool_calls only on an assistant message, as a list"
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                return 'expected each tool call to be {"type": "function", "function": {"name": str, "arguments": str}}'
            if not isinstance(fn.get("arguments", ""), (str, dict)):
                return "expected a tool call's arguments to be JSON text"
    content = message.get("content")
    if not isinstance(content, str) and not (content is None and calls):
        return 'expected a dict with a string "role" and a string "content"'
    if not isinstance(message.get("tool_call_id", ""), str):
        return "expected tool_call_id to be a string"
    return None


def check_messages(messages: object) -> list[dict]:
    """TinyLLMError unless messages is a list of {"role": str, "content": str} dicts (plus OpenAI's tool-calling
    fields: an assistant's tool_calls, a tool message's tool_call_id)."""
    if not isinstance(messages, list):
        raise TinyLLMError(
            f'messages is a {type(messages).__name__}, expected a list of {{"role": str, "content": str}} dicts'
        )
    for i, message in enumerate(messages):
        problem = _message_problem(message)
        if problem is not None:
            raise TinyLLMError(f"messages[{i}] is {message!r}, {problem}")
    return messages


def check_tools(tools: object) -> list[dict] | None:
    """None, or a list of tool descriptions (JSON-schema dicts, as templates expect them)."""
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise TinyLLMError(f"tools must be a list of dicts (JSON schemas of functions), got {tools!r:.80}")
    return tools


@lru_cache(maxsize=16)
def uses_tools(source: str) -> bool:
    """Whether the template reads the `tools` variable (if not, tinyllm writes the tools into the prompt)."""
    import jinja2
    from jinja2 import meta

    compile_template(source)  # a template that does not compile fails here with its own message
    return "tools" in meta.find_undeclared_variables(
        jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(source)
    )


def _has_tool_turns(messages: list[dict]) -> bool:
    return any(m.get("tool_calls") or m["role"] == "tool" for m in messages)


def render_chat(
    source: str,
    messages: list[dict],
    add_generation_prompt: bool,
    special_tokens: dict[str, str],
    tools: list[dict] | None = None,
    variables: dict | None = None,
) -> str:
    """The prompt text; special_tokens (bos_token, eos_token, ...) are visible to the template. `tools` are
    OpenAI's tool objects: given to a template that reads them, else written into the system prompt. `variables`
    are the request's own (such as Qwen3's enable_thinking); they never replace the ones set here."""
    import jinja2

    template = compile_template(source)
    check_messages(messages)
    tools = check_tools(tools)
    if tools or _has_tool_turns(messages):
        native = uses_tools(source)
        fmt = detect_format(source)
        plain = for_tool_template(messages) if native else for_plain_template(messages, tools, fmt)
        tools = (tools or None) if native else None
    else:  # copies, so a template can never change the caller's messages
        plain, tools = [dict(m) for m in messages], None
    try:
        # tools/documents are None when absent, as in transformers, so `is none` tests in templates agree.
        own = dict(messages=plain, tools=tools, documents=None, add_generation_prompt=add_generation_prompt)
        return template.render({**(variables or {}), **own, **special_tokens})
    except jinja2.exceptions.TemplateError as exc:
        # A template's raise_exception reports a conversation it does not accept.
        raise TinyLLMError(
            f"the chat template rejected these messages ({exc}), expected a conversation the model's template accepts"
        ) from None
