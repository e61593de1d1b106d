"""POST /v1/responses, the stateless part of OpenAI's Responses API: text or a list of messages as `input`,
`instructions` as a system message before it, `max_output_tokens`, `temperature`, `top_p`, `stream` (the event
sequence in response_shapes.py), and function `tools` with `tool_choice` and `parallel_tool_calls`, whose calls
come back as `function_call` output items and go back in as `function_call` and `function_call_output` input
items (checks/response_tools.py: the chat's tool calling underneath), and `reasoning.effort` for a model that
reasons ("none" turns its thinking off), whose thinking comes back as a `reasoning` item before the message. It
keeps no state: every other field that would change the answer (previous_response_id, store=true, tools of other
kinds, ...) is a 400 naming it. A streamed answer with tools sends its items once the answer is whole (a call's
text is not shown as it is written); a reasoning model's stream sends its reasoning item's text, then its
message's, as they come (response_stream.py).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from ..checks.prompts import chat_prompt
from ..checks.reasoning import Thinking, thinking_of
from ..checks.response_tools import call_message, chat_tool_fields, output_message
from ..checks.sampling_params import fresh_seed, per_choice
from ..checks.structured import compile_structured
from ..checks.tools import ToolRequest, compile_tools, new_call_id, tools_from
from ..checks.unsupported import field_table, is_one_of
from ..state import Ready
from ..wire.errors import APIError, bad_request, nesting_is_400
from ..wire.protocol import ChatMessage, ResponsesRequest
from ..wire.response_shapes import (
    ResponseMeta,
    closing_events,
    delta_event,
    event,
    finished_response,
    opening_events,
    usage,
)
from .request_group import RequestGroup
from .response_stream import ReasoningItems
from .serving import Choice, ClientGone, EventStream, client_gone_response, collect, engine_error, owned, start_group

PROMPT_PARAM = "input"
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = ("input_text", "output_text")
# Accepted, and change nothing about the answer.
HARMLESS = {"metadata", "user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "service_tier"}
TOOL_FIELDS = {"tools", "tool_choice", "parallel_tool_calls"}  # checks/response_tools.py
REASONING = "reasoning"  # {"effort": ...}: read by _thinking
# Accepted only with the values that ask for nothing.
NEUTRAL = field_table(
    ("store", is_one_of(False), "false"),
    ("truncation", is_one_of("disabled"), '"disabled"'),
    ("include", is_one_of([]), "an empty list"),
    ("text", is_one_of({"format": {"type": "text"}}), '{"format": {"type": "text"}}'),
    ("background", is_one_of(False), "false"),
    ("top_logprobs", is_one_of(0), "0"),
)


def check_fields(body: ResponsesRequest) -> None:
    for name, value in (body.model_extra or {}).items():
        if value is None or name in HARMLESS or name in TOOL_FIELDS or name == REASONING:
            continue
        entry = NEUTRAL.get(name)
        if entry is None or not entry.is_neutral(value, {}):
            send = f"send {entry.accepted} or leave it out" if entry is not None else "leave it out"
            raise bad_request(
                f"{name} is not supported by this server's /v1/responses (it would be ignored); {send}", name
            )


def _item_text(i: int, content) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else None
    if parts is None or not all(isinstance(p, dict) and p.get("type") in TEXT_PARTS for p in parts):
        raise bad_request(f"input[{i}].content must be text or a list of input_text parts", "input")
    if not all(isinstance(p.get("text"), str) for p in parts):
        raise bad_request(f"input[{i}].content has a text part without a string text", "input")
    return "".join(p["text"] for p in parts)


def input_messages(body: ResponsesRequest) -> list[ChatMessage]:
    """The conversation for the chat template: instructions first, then the input's messages."""
    messages = [ChatMessage(role="system", content=body.instructions)] if body.instructions is not None else []
    if isinstance(body.input, str):
        return [*messages, ChatMessage(role="user", content=body.input)]
    if not body.input:
        raise bad_request("input is an empty list; expected text or at least one message", "input")
    calls: list[dict] = []  # consecutive function_call items: one assistant turn
    for i, item in enumerate(body.input):
        kind = item.get("type", "message")
        if kind == "function_call":
            calls.append(item)
            continue
        if calls:
            messages.append(call_message(i - 1, calls))
            calls = []
        if kind == "function_call_output":
            messages.append(output_message(i, item))
        elif kind == "message" and item.get("role") in ROLES:
            messages.append(ChatMessage(role=ROLES[item["role"]], content=_item_text(i, item.get("content"))))
        else:
            raise bad_request(
                f"input[{i}] must be a message with role user, assistant, system or developer, a function_call "
                f"or a function_call_output (got type {kind!r}, role {item.get('role')!r})",
                "input",
            )
    if calls:
        messages.append(call_message(len(body.input) - 1, calls))
    return messages


async def create_response(body: ResponsesRequest, request: Request, ctx: Ready) -> Response:
    with nesting_is_400():
        prompt, params, tools, thinking = await _prepared(body, ctx)
    ids = prompt.ids
    group = RequestGroup(ctx.engine, 1)
    await start_group(group, [(ids, params)], PROMPT_PARAM)
    extra = body.model_extra or {}
    settings = {
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "top_p": 1.0 if body.top_p is None else body.top_p,
        "tools": extra.get("tools") or [],
        "tool_choice": extra.get("tool_choice") or ("auto" if tools is not None else "none"),
        "parallel_tool_calls": extra.get("parallel_tool_calls") is not False and tools is not None,
    }
    meta = ResponseMeta(
        f"resp_{secrets.token_hex(16)}", f"msg_{secrets.token_hex(16)}", ctx.model_name, int(time.time()), settings
    )
    choice = Choice(0, 0, len(ids), reasons=thinking.reasons)
    if body.stream:
        return EventStream(_events(group, meta, choice, tools), group.close)
    return await owned(group, _whole(request, group, meta, choice, tools))


async def _prepared(body: ResponsesRequest, ctx: Ready):
    ctx.check_model(body.model)
    check_fields(body)
    messages = input_messages(body)
    tools = tools_from(chat_tool_fields(body.model_extra or {}), ctx.tokenizer.chat_template)
    prompt_tools = tools.prompt_tools() if tools is not None else None
    ctx.limits.check_messages(messages, prompt_tools)
    forced = tools.constraint() if tools is not None else None
    thinking = _thinking(body, ctx, forced is not None)
    prompt = await run_in_threadpool(_prompt, ctx, messages, tools, forced, thinking)
    ctx.limits.check_room(len(prompt.ids), body.max_output_tokens, PROMPT_PARAM, "max_output_tokens")
    values = {"temperature": body.temperature, "top_p": body.top_p, "max_tokens": body.max_output_tokens}
    values = {k: v for k, v in values.items() if v is not None}
    names = {"max_tokens": "max_output_tokens"}
    if forced is not None:
        values["structured"], names["structured"] = forced, "tool_choice"
    if thinking.reasons:
        values["reasoning"] = True
    [params] = per_choice(values, names, fresh_seed(), 1)
    return prompt, params, tools, thinking


def _thinking(body: ResponsesRequest, ctx: Ready, constrained: bool) -> Thinking:
    asked = (body.model_extra or {}).get(REASONING)
    if asked is not None and (not isinstance(asked, dict) or set(asked) - {"effort", "summary"}):
        raise bad_request(f'reasoning is {asked!r}, expected {{"effort": "none" | "low" | ...}}', REASONING)
    effort = (asked or {}).get("effort")
    if ctx.tokenizer.reasoning is None and effort not in (None, "none"):
        raise bad_request(f"reasoning {asked!r} is not supported: this model does not reason; leave it out", REASONING)
    try:
        return thinking_of({"reasoning_effort": effort}, ctx.tokenizer.reasoning, constrained)
    except APIError as exc:
        raise bad_request(exc.message.replace("reasoning_effort", "reasoning.effort"), REASONING) from None


def _prompt(ctx: Ready, messages: list[ChatMessage], tools: ToolRequest | None, forced, thinking: Thinking):
    """Off the event loop: the tools' grammar compiled, the prompt rendered and encoded."""
    compile_tools(ctx.parts.grammars, tools)
    compile_structured(ctx.parts.grammars, forced, "tool_choice")
    prompt_tools = tools.prompt_tools() if tools is not None else None
    return chat_prompt(ctx.tokenizer, messages, True, prompt_tools, thinking.variables)


def _final(meta: ResponseMeta, choice: Choice, tools: ToolRequest | None) -> dict:
    used = usage(choice.prompt_tokens, choice.completion_tokens, choice.cached_tokens, choice.reasoning_tokens)
    text, calls = choice.text, []
    if tools is not None and tools.is_rendered:
        parsed = tools.parse(choice.text)
        if parsed.calls:
            text, calls = parsed.content or None, [(new_call_id(), c.name, c.arguments) for c in parsed.calls]
    return finished_response(meta, text, choice.finish_reason, used, calls, choice.reasoning)


async def _whole(
    request: Request, group: RequestGroup, meta: ResponseMeta, choice: Choice, tools: ToolRequest | None
) -> Response:
    try:
        await collect(request, group, [choice], PROMPT_PARAM)
    except ClientGone:
        return client_gone_response()
    return JSONResponse(_final(meta, choice, tools))


async def _events(
    group: RequestGroup, meta: ResponseMeta, choice: Choice, tools: ToolRequest | None
) -> AsyncIterator[str]:
    held = tools is not None and tools.is_rendered  # calls are read from the whole answer: its items come at the end
    items = ReasoningItems(meta) if choice.reasons and not held else None  # a reasoning item, then the message
    try:
        for text in opening_events(meta, with_message=not held and items is None):
            yield text
        async for _, output in group.outputs():
            error = choice.update(output)
            if error is not None:
                raise error
            if items is not None:
                for text in items.on_split(choice.last):
                    yield text
            elif output.text and not held:
                yield delta_event(meta, output.text)
        final = _final(meta, choice, tools)
        for text in items.finish("completed" if final["status"] == "completed" else "incomplete") if items else []:
            yield text
        for text in closing_events(meta, final, streamed_message=not held):
            yield text
    except Exception as exc:  # headers are sent: the error travels as an event
        error = engine_error(exc, PROMPT_PARAM)
        yield event(meta, "error", code=error.code, message=error.message, param=error.param)
    finally:
        group.close()
