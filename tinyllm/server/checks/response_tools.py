"""Function tools on /v1/responses, as the chat's: the Responses API's flat tool objects
(`{"type": "function", "name", "description", "parameters", "strict"}`), its `tool_choice` (`"auto"`, `"none"`,
`"required"`, `{"type": "function", "name": ...}`) and its input items `function_call` (a call the model made)
and `function_call_output` (what the caller's function returned) become the chat's tools, tool_choice,
assistant tool_calls and tool messages, so that checks/tools.py checks, renders, constrains and parses them
exactly as on /v1/chat/completions. Tools of other types (web search, files, ...) are a 400 naming them.
"""

from __future__ import annotations

from typing import Any

from ..wire.client_text import clip
from ..wire.errors import bad_request
from ..wire.protocol import ChatMessage

_FUNCTION_KEYS = ("name", "description", "parameters", "strict")


def chat_tool_fields(extra: dict) -> dict:
    """The request's tools, tool_choice and parallel_tool_calls in the chat's shape (for tools_from)."""
    tools = extra.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise bad_request(f"tools must be a list of function tools, got {type(tools).__name__}", "tools")
    fields: dict[str, Any] = {"tools": [_chat_tool(i, t) for i, t in enumerate(tools or [])]}
    choice = extra.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function" and "function" not in choice:
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    if choice is not None:
        fields["tool_choice"] = choice
    if extra.get("parallel_tool_calls") is not None:
        fields["parallel_tool_calls"] = extra["parallel_tool_calls"]
    return fields


def _chat_tool(i: int, tool: Any) -> dict:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        raise bad_request(f"tools[{i}] is of type {clip(repr(kind))}; this server runs function tools only", "tools")
    if "function" in tool:  # the chat's nested shape, which some clients send here too
        return {"type": "function", "function": tool["function"]}
    return {"type": "function", "function": {k: tool[k] for k in _FUNCTION_KEYS if tool.get(k) is not None}}


def call_message(i: int, items: list[dict]) -> ChatMessage:
    """Consecutive function_call items as one assistant message with tool_calls."""
    calls = []
    for item in items:
        name, arguments, call_id = item.get("name"), item.get("arguments"), item.get("call_id")
        if not all(isinstance(v, str) for v in (name, arguments, call_id)):
            raise bad_request(f"input[{i}] is a function_call without a string name, arguments and call_id", "input")
        calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
    return ChatMessage(role="assistant", content=None, tool_calls=calls)


def output_message(i: int, item: dict) -> ChatMessage:
    """A function_call_output item as the chat's tool message."""
    output, call_id = item.get("output"), item.get("call_id")
    if not isinstance(output, str) or not isinstance(call_id, str):
        raise bad_request(f"input[{i}] is a function_call_output without a string call_id and output", "input")
    return ChatMessage(role="tool", content=output, tool_call_id=call_id)
