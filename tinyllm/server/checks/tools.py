"""Tool calling on /v1/chat/completions: the request's `tools`, `tool_choice` and `parallel_tool_calls`
checked into one ToolRequest, the constraint that makes "required" and a named function certain, and a
finished choice's text turned into OpenAI's `tool_calls`.

tool_choice "none" leaves the tools out of the prompt; "auto" shows them and reads any calls the model
writes; "required" and {"type": "function", "function": {"name": ...}} also hold the output to a grammar:
exactly one call, in the model family's format, whose arguments are valid for the function's schema.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from ...errors import TinyLLMError
from ...grammar.structured import StructuredOutput
from ...text.tool_calls import ParsedOutput, ToolCallFormat, call_grammar, detect_format, parse_tool_calls
from ..wire.client_text import clip
from ..wire.errors import bad_request
from ..wire.limits import MAX_GRAMMAR_BYTES, MAX_TOOLS
from ..wire.protocol import FunctionCall, ToolCall

CHOICES = ("none", "auto", "required")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names


@dataclass(frozen=True)
class ToolRequest:
    tools: tuple[dict, ...]  # OpenAI's tool objects, as sent (checked)
    choice: str  # "none", "auto", "required", or the name of the one function to call
    parallel: bool  # False: only the first call of an answer is kept
    fmt: ToolCallFormat

    @property
    def is_rendered(self) -> bool:
        return self.choice != "none"

    @property
    def is_forced(self) -> bool:
        return self.choice not in ("none", "auto")

    def prompt_tools(self) -> list[dict] | None:
        return list(self.tools) if self.is_rendered else None

    def constraint(self) -> StructuredOutput | None:
        """The grammar for required / a named function; None when the model decides."""
        if not self.is_forced:
            return None
        functions = [t["function"] for t in self.tools]
        if self.choice != "required":
            functions = [f for f in functions if f["name"] == self.choice]
        try:
            return StructuredOutput.grammar(call_grammar(self.fmt, functions))
        except TinyLLMError as exc:  # e.g. a function whose required arguments contain themselves
            raise bad_request(f"tools: {clip(str(exc))}", "tools") from None

    def parse(self, text: str) -> ParsedOutput:
        parsed = parse_tool_calls(text, self.fmt)
        if not self.parallel and len(parsed.calls) > 1:
            return ParsedOutput(parsed.content, parsed.calls[:1])
        return parsed


def _check_tool(i: int, tool: Any) -> str:
    """The function's name; a 400 naming what is wrong with tools[i]."""

    def fail(problem: str):
        raise bad_request(f"tools[{i}] {problem}", "tools")

    if not isinstance(tool, dict) or tool.get("type") != "function":
        fail(f'must be {{"type": "function", "function": {{...}}}}, got {clip(repr(tool))}')
    fn = tool.get("function")
    if not isinstance(fn, dict):
        fail('has no "function" object')
    name = fn.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        fail(f"function.name must be 1 to 64 letters, digits, '_' or '-', got {clip(repr(name))}")
    if not isinstance(fn.get("description", ""), str):
        fail("function.description must be a string")
    params = fn.get("parameters")
    if params is not None and (not isinstance(params, dict) or params.get("type", "object") != "object"):
        fail(f'function.parameters must be a JSON schema of "type": "object", got {clip(repr(params))}')
    if not isinstance(fn.get("strict", False), bool):
        fail("function.strict must be a bool")
    return name


def _choice(value: Any, names: list[str]) -> str:
    if value is None:
        return "auto" if names else "none"
    if isinstance(value, str):
        if value not in CHOICES:
            raise bad_request(
                f'tool_choice must be "none", "auto", "required" or a function, got {clip(repr(value))}', "tool_choice"
            )
        if value != "none" and not names:
            raise bad_request(f"tool_choice {value!r} needs tools; send tools or leave tool_choice out", "tool_choice")
        return value
    fn = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise bad_request(
            f'tool_choice must be "none", "auto", "required" or {{"type": "function", "function": {{"name": ...}}}}, '
            f"got {clip(repr(value))}",
            "tool_choice",
        )
    if name not in names:
        raise bad_request(f"tool_choice names function {clip(repr(name))}, which is not in tools", "tool_choice")
    return name


def _check_schema_size(tools: list) -> None:
    """The parameter schemas compile into one grammar: their JSON is bounded together, before it compiles."""
    schemas = [t["function"].get("parameters") for t in tools]
    size = len(json.dumps(schemas, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > MAX_GRAMMAR_BYTES:
        raise bad_request(
            f"the tools' parameter schemas have {size} bytes of JSON together, more than the limit of "
            f"{MAX_GRAMMAR_BYTES}",
            "tools",
        )


def tools_from(sent: dict, template_source: str | None) -> ToolRequest | None:
    """The tool calling of a request's fields (`tools`, `tool_choice`, `parallel_tool_calls`), or None when it
    sends no tools; a 400 naming the bad field."""
    tools, parallel = sent.get("tools"), sent.get("parallel_tool_calls")
    if tools is not None and not isinstance(tools, list):
        raise bad_request(f"tools must be a list of function tools, got {type(tools).__name__}", "tools")
    if tools and len(tools) > MAX_TOOLS:  # before each is checked
        raise bad_request(f"tools has {len(tools)} tools, more than the limit of {MAX_TOOLS}", "tools")
    names = [_check_tool(i, t) for i, t in enumerate(tools or [])]
    if tools:
        _check_schema_size(tools)
    duplicate = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if duplicate is not None:
        raise bad_request(f"tools names function {duplicate!r} twice; names must be unique", "tools")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad_request(f"parallel_tool_calls must be a bool, got {parallel!r}", "parallel_tool_calls")
    choice = _choice(sent.get("tool_choice"), names)
    if not names:
        return None
    return ToolRequest(tuple(tools), choice, parallel is not False, detect_format(template_source))


def compile_tools(grammars, tools: ToolRequest | None) -> None:
    """Every function's parameter schema compiled now (in a worker thread): a schema the grammar engine
    cannot use is a 400 naming tools, whatever tool_choice is."""
    if tools is None:
        return
    try:
        grammars.compile(StructuredOutput.grammar(call_grammar(tools.fmt, [t["function"] for t in tools.tools])))
    except TinyLLMError as exc:
        problem = clip(str(exc))
        raise bad_request(f"tools: a function's parameters are not a usable JSON schema ({problem})", "tools") from None
    except RecursionError:
        raise bad_request("tools: a function's parameters nest too deeply to be compiled", "tools") from None


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def tool_calls_of(parsed: ParsedOutput) -> list[ToolCall]:
    return [ToolCall(id=new_call_id(), function=FunctionCall(name=c.name, arguments=c.arguments)) for c in parsed.calls]
