"""How a chat-template family writes a tool call, as data, and the parser that reads calls back out of
generated text.

Terms: a `ToolCallFormat` says how one family wraps a call — the text that opens it (`open`), the text
that closes it (`close`), the key holding the arguments (`args_key`), and whether the calls come as one
JSON list (`is_list`). `detect_format` picks the format whose markers appear in a template's source;
templates that know nothing of tools get Hermes' `<tool_call>` wrapper, which tinyllm then describes in
the system prompt (tool_prompt.py). `parse_tool_calls` splits text into the prose before the first call and
the calls; text that only looks like a call (broken JSON, no name) stays prose, so nothing is lost.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from ..grammar.schema_rewrite import rewritten


@dataclass(frozen=True)
class ToolCallFormat:
    name: str
    detect: tuple[str, ...]  # any of these in a template's source selects this format
    open: str  # written before a call (before the list, when is_list)
    close: str  # written after it
    args_key: str  # "arguments" or "parameters"
    is_list: bool = False  # all calls in one JSON list after `open`
    bare: bool = False  # a call may also start the output with its JSON alone, without `open`

    def __post_init__(self) -> None:
        if self.args_key not in ("arguments", "parameters"):
            raise ValueError(f"args_key must be 'arguments' or 'parameters', got {self.args_key!r}")
        if not self.open and not self.bare:
            raise ValueError(f"format {self.name!r} has no opening text, so its calls must be bare")

    def write(self, calls: list[dict]) -> str:
        """The text a model of this family writes for `calls` ({"name", "arguments": dict} each)."""
        objects = [{"name": c["name"], self.args_key: c["arguments"]} for c in calls]
        if self.is_list:
            return self.open + json.dumps(objects, ensure_ascii=False) + self.close
        return "".join(self.open + json.dumps(o, ensure_ascii=False) + self.close for o in objects)


HERMES = ToolCallFormat("hermes", ("<tool_call>",), "<tool_call>\n", "\n</tool_call>", "arguments")
# Llama 3.1+ JSON tool calls: the whole answer is {"name": ..., "parameters": {...}}.
LLAMA3_JSON = ToolCallFormat(
    "llama3_json", ("<|python_tag|>", "dictionary of argument name"), "", "", "parameters", bare=True
)
MISTRAL = ToolCallFormat("mistral", ("[TOOL_CALLS]",), "[TOOL_CALLS]", "", "arguments", is_list=True, bare=True)

# Checked in order: the first whose marker the template holds wins; HERMES is the default.
FORMATS = (MISTRAL, HERMES, LLAMA3_JSON)
DEFAULT_FORMAT = HERMES


def detect_format(template_source: str | None) -> ToolCallFormat:
    """The tool-call format of a chat template, from the markers in its source (Hermes when none)."""
    for fmt in FORMATS:
        if template_source and any(marker in template_source for marker in fmt.detect):
            return fmt
    return DEFAULT_FORMAT


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # JSON text of an object, as OpenAI's function.arguments


@dataclass(frozen=True)
class ParsedOutput:
    content: str  # the prose before the first call, trailing whitespace dropped (all of the text when no call)
    calls: tuple[ParsedCall, ...]


def call_start(text: str, fmt: ToolCallFormat) -> int | None:
    """Where the first call begins in text, or None."""
    at = text.find(fmt.open) if fmt.open else -1
    if fmt.bare:
        stripped = text.lstrip()
        if stripped[:1] == ("[" if fmt.is_list else "{") and (at < 0 or at > len(text) - len(stripped)):
            return len(text) - len(stripped)
    return at if at >= 0 else None


def parse_tool_calls(text: str, fmt: ToolCallFormat) -> ParsedOutput:
    """The prose and the calls of a model's answer; all prose when the calls do not parse."""
    start = call_start(text, fmt)
    if start is None:
        return ParsedOutput(text, ())
    objects = _call_objects(text[start:], fmt)
    calls = None if objects is None else [_as_call(o, fmt) for o in objects]
    if not calls or any(c is None for c in calls):
        return ParsedOutput(text, ())
    return ParsedOutput(text[:start].rstrip(), tuple(calls))


def _call_objects(text: str, fmt: ToolCallFormat) -> list | None:
    """The JSON values of the calls from `text` (which starts at the first call), or None if any is broken."""
    decoder, objects, pos = json.JSONDecoder(), [], 0
    while True:
        pos = _skip(text, pos, fmt.open)
        if pos >= len(text):
            break
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return None
        objects.extend(value if isinstance(value, list) and fmt.is_list else [value])
        pos = _skip(text, pos, fmt.close.strip())
        rest = text[pos:].lstrip(" \n;,")
        if not rest:
            break
        if not (fmt.open and rest.startswith(fmt.open.strip())) and not (fmt.bare and rest[:1] in "{["):
            return None  # prose after a call: not an answer made of calls
        pos = len(text) - len(rest)
    return objects


def _skip(text: str, pos: int, marker: str) -> int:
    """pos moved past whitespace and separators, then past `marker` and whitespace if the marker comes next."""
    while pos < len(text) and text[pos] in " \t\r\n;,":
        pos += 1
    marker = marker.strip()
    if not marker or not text.startswith(marker, pos):
        return pos
    pos += len(marker)
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _as_call(value: Any, fmt: ToolCallFormat) -> ParsedCall | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    args = value.get(fmt.args_key, value.get("arguments", value.get("parameters", {})))
    if isinstance(args, str):  # some models write the arguments as JSON text already
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return ParsedCall(value["name"], json.dumps(args, ensure_ascii=False))


def call_grammar(fmt: ToolCallFormat, functions: list[dict]) -> str:
    """A Lark grammar (llguidance's, with %json) for exactly one call, in this format, to one of `functions`
    ({"name", "parameters": JSON schema} each), its arguments valid for that function's schema."""
    if not functions:
        raise ValueError("call_grammar needs at least one function")
    rules = [f"fn{i}: %json {json.dumps(_call_schema(fmt, f), ensure_ascii=False)}" for i, f in enumerate(functions)]
    call = " | ".join(f"fn{i}" for i in range(len(functions)))
    body = '"[" call "]"' if fmt.is_list else "call"
    # Lark string literals take JSON's escapes, so json.dumps spells the wrappers exactly.
    parts = [json.dumps(s) for s in (fmt.open, fmt.close) if s]
    start = " ".join([parts[0], body, *parts[1:]] if fmt.open else [body, *parts])
    return "\n".join([f"start: {start}", f"call: {call}", *rules])


def _arguments_schema(parameters: dict | None, args_key: str) -> dict:
    """A function's parameters as the schema of a call's arguments: every object that says nothing of other
    keys closed to them, as OpenAI's strict function calling asks (a call names the arguments the function
    declares; a small model given room to invent more keys may never stop), numbers bounded as in any JSON
    output (grammar/schema_rewrite.py), and its `#` references rebased under the call's `args_key`."""
    params = copy.deepcopy(parameters) if parameters else {"type": "object", "properties": {}}
    if not isinstance(params, dict):
        return params
    return _rebased(rewritten(params, strict=True, bounded_numbers=True), f"#/properties/{args_key}")


def _rebased(schema: dict, prefix: str) -> dict:
    """`schema` with every local reference ("#...") made relative to `prefix`, in place (no recursion)."""
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
                node["$ref"] = prefix + ref[1:]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return schema


def _call_schema(fmt: ToolCallFormat, function: dict) -> dict:
    params = _arguments_schema(function.get("parameters"), fmt.args_key)
    return {
        "type": "object",
        "properties": {"name": {"const": function["name"]}, fmt.args_key: params},
        "required": ["name", fmt.args_key],
        "additionalProperties": False,
        # compact JSON, as for response_format: free whitespace lets a small model wander forever
        "x-guidance": {"whitespace_flexible": False},
    }
