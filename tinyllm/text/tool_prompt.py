"""A conversation with tools made ready for a chat template.

A template that reads `tools` gets them as transformers passes them (OpenAI's [{"type": "function",
"function": {...}}] list) and the messages as they came, with each call's arguments as a dict, since
templates write them with `tojson`. A template that never mentions `tools` (SmolLM2's) would drop them
silently, so tinyllm writes them itself: a section at the end of the system message lists the functions
as JSON and shows the call format, past calls become the assistant's text in that format, and each tool
result becomes a user turn wrapped in <tool_response> tags.
"""

from __future__ import annotations

import json

from .tool_calls import ToolCallFormat

TOOLS_SECTION = """\
# Tools

You can call functions to help answer. These are the functions, one JSON object a line:
<tools>
{tools}
</tools>

To call a function, answer with nothing but the call, written exactly like this:
{example}
Each function's result comes back to you in a <tool_response></tool_response> block."""


def tools_section(tools: list[dict], fmt: ToolCallFormat) -> str:
    """The system-prompt text describing `tools` (OpenAI's tool objects) and the call format."""
    listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    example = fmt.write([{"name": "<function name>", "arguments": {"<argument>": "<value>"}}])
    return TOOLS_SECTION.format(tools=listed, example=example)


def _arguments(call: dict) -> dict:
    """A past call's arguments as a dict: the API sends them as JSON text."""
    args = call["function"].get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return {"arguments": args}  # kept as sent: the template still shows what was called
    return args if isinstance(args, dict) else {}


def for_tool_template(messages: list[dict]) -> list[dict]:
    """Messages for a template that handles tools itself: content never None, arguments as dicts."""
    out = []
    for m in messages:
        m = {**m, "content": m.get("content") or ""}
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": _arguments(c)}} for c in m["tool_calls"]
            ]
        out.append(m)
    return out


def for_plain_template(messages: list[dict], tools: list[dict] | None, fmt: ToolCallFormat) -> list[dict]:
    """Messages for a template that knows nothing of tools: everything spelled out as text."""
    out = []
    for m in messages:
        content = m.get("content") or ""
        if m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"})
        elif m.get("tool_calls"):
            calls = [{"name": c["function"]["name"], "arguments": _arguments(c)} for c in m["tool_calls"]]
            text = fmt.write(calls)
            out.append({"role": m["role"], "content": f"{content}\n{text}" if content else text})
        else:
            out.append({"role": m["role"], "content": content})
    if tools:
        section = tools_section(tools, fmt)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{section}".lstrip()}
        else:
            out.insert(0, {"role": "system", "content": section})
    return out
