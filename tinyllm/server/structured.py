"""Structured-output request fields into one StructuredOutput: OpenAI's `response_format` (chat), vLLM's
`guided_json` / `guided_regex` / `guided_grammar` / `guided_choice` and `structured_outputs`, and llama.cpp's
`json_schema` / `grammar` (both endpoints). At most one may ask for a constraint; a malformed one, or one the
grammar engine cannot compile, is a 400 naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..errors import TinyLLMError
from ..sampling.structured import StructuredOutput
from .errors import bad_request

S = StructuredOutput


def _choice(value: Any) -> StructuredOutput:
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
        raise TinyLLMError(f"a choice must be a non-empty list of non-empty strings, got {value!r}")
    # Lark string literals: JSON's escapes are Lark's, so json.dumps spells each choice exactly
    return S.grammar("start: " + " | ".join(json.dumps(c) for c in value))


def _structured_outputs(value: Any) -> StructuredOutput:
    """vLLM's newer form: {"json": schema} | {"regex": ...} | {"grammar": ...} | {"choice": [...]} |
    {"json_object": true}."""
    if not isinstance(value, dict):
        raise TinyLLMError(f"structured_outputs must be an object, got {type(value).__name__}")
    asked = {k: v for k, v in value.items() if k in _SUB_FIELDS and v not in (None, False)}
    if len(asked) != 1:
        raise TinyLLMError(
            f"structured_outputs must set exactly one of {', '.join(_SUB_FIELDS)}, got {sorted(asked) or 'none'}"
        )
    [(key, spec)] = asked.items()
    return _SUB_FIELDS[key](spec)


_SUB_FIELDS: dict[str, Callable[[Any], StructuredOutput]] = {
    "json": S.json_schema,
    "regex": S.regex,
    "grammar": S.grammar,
    "choice": _choice,
    "json_object": lambda _: S.json_object(),
}

# request field -> how its value becomes a StructuredOutput (None: the value asks for nothing)
_EXTRA_FIELDS: dict[str, Callable[[Any], StructuredOutput | None]] = {
    "guided_json": S.json_schema,
    "guided_regex": S.regex,
    "guided_grammar": S.grammar,
    "guided_choice": _choice,
    "structured_outputs": _structured_outputs,
    "json_schema": S.json_schema,
    "grammar": S.grammar,
}


def _response_format(value: Any) -> StructuredOutput | None:
    """OpenAI's response_format: {"type": "text"}, {"type": "json_object"} or
    {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}."""
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return S.json_object()
    if kind != "json_schema":
        raise TinyLLMError(f'response_format type must be "text", "json_object" or "json_schema", got {kind!r}')
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise TinyLLMError("response_format json_schema must be an object with a name (and a schema)")
    if spec.get("strict") not in (None, True, False):
        raise TinyLLMError(f"response_format json_schema.strict must be a bool, got {spec['strict']!r}")
    # strict or not, the output is held to the schema: a constraint that may be broken is no constraint
    return S.json_object() if spec.get("schema") is None else S.json_schema(spec["schema"])


def structured_from(body) -> tuple[StructuredOutput | None, str | None]:
    """The request's constraint and the field it came from; a 400 for a malformed or doubled one."""
    sent = {**(body.model_extra or {})}
    found = []
    for name, build in (("response_format", _response_format), *_EXTRA_FIELDS.items()):
        value = sent.get(name)
        if value is None:
            continue
        try:
            structured = build(value)
        except TinyLLMError as exc:
            raise bad_request(f"{name}: {exc}", name) from None
        if structured is not None:
            found.append((structured, name))
    if len(found) > 1:
        raise bad_request(
            f"only one structured-output field may be sent, got {', '.join(n for _, n in found)}", found[1][1]
        )
    return found[0] if found else (None, None)


def compile_structured(grammars, structured: StructuredOutput | None, field: str | None) -> None:
    """Compile now (in a worker thread) so the engine only copies it; a grammar that cannot compile is a 400."""
    if structured is None:
        return
    try:
        grammars.compile(structured)
    except TinyLLMError as exc:
        raise bad_request(str(exc), field) from None
