"""Structured-output request fields into one StructuredOutput: OpenAI's `response_format` (chat), vLLM's
`guided_json` / `guided_regex` / `guided_grammar` / `guided_choice` and `structured_outputs`, and llama.cpp's
`json_schema` / `grammar` (both endpoints). At most one may ask for a constraint; a malformed one, one over the
size limits (limits.py: checked before anything compiles), or one the grammar engine cannot compile, is a 400
naming the field.

A list of choices becomes one lexeme: a regex that alternates the choices, each escaped character by character.
As grammar alternatives (`start: "a" | "b" | ...`) each choice is an item in the parser's row, and past a couple
of thousand the parser gives up in the middle of generating; a single regex is one item whatever the count.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ...errors import TinyLLMError
from ...grammar.structured import StructuredOutput
from ..wire.client_text import clip
from ..wire.errors import bad_request
from ..wire.json_depth import nests_deeper_than
from ..wire.limits import MAX_CHOICE_BYTES, MAX_CHOICES, MAX_GRAMMAR_BYTES, MAX_JSON_DEPTH

S = StructuredOutput


def _regex_char(c: str) -> str:
    # Letters and digits stand for themselves, so does any non-ASCII printable character; anything else is written
    # as its code point, which the regex syntax reads literally whatever the character means to it (or to Lark's
    # /.../ delimiters).
    keep = c.isalnum() if c.isascii() else c.isprintable()
    return c if keep else f"\\x{{{ord(c):X}}}"


def choice_regex(choices: list[str]) -> str:
    """A regex matching exactly one of `choices`."""
    return "(?:" + "|".join("".join(_regex_char(c) for c in choice) for choice in choices) + ")"


def from_choices(value: Any) -> StructuredOutput:
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
        raise TinyLLMError(f"a choice must be a non-empty list of non-empty strings, got {clip(repr(value))}")
    if len(value) > MAX_CHOICES:
        raise TinyLLMError(f"{len(value)} choices were sent, more than the limit of {MAX_CHOICES}")
    size = sum(len(c.encode("utf-8", "surrogatepass")) for c in value)
    if size > MAX_CHOICE_BYTES:
        raise TinyLLMError(f"the choices have {size} bytes together, more than the limit of {MAX_CHOICE_BYTES}")
    return S.grammar(f"start: /{choice_regex(value)}/")


def from_schema(value: Any, strict: bool = False) -> StructuredOutput:
    """A JSON schema given as an object or as JSON text, bounded in size (and, as text, in depth) before it is
    read; `strict`: objects that do not say otherwise are closed (StructuredOutput.json_schema)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    _check_size(text)
    if isinstance(value, str) and nests_deeper_than(value, MAX_JSON_DEPTH):
        raise TinyLLMError(f"the schema nests arrays and objects more than {MAX_JSON_DEPTH} levels deep, the limit")
    return S.json_schema(value, strict=strict)


def bounded(build: Callable[[str], StructuredOutput]) -> Callable[[Any], StructuredOutput]:
    """A regex or grammar, bounded in size before it is kept."""

    def checked(value: Any) -> StructuredOutput:
        if isinstance(value, str):
            _check_size(value)
        return build(value)

    return checked


def _check_size(text: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_GRAMMAR_BYTES:
        raise TinyLLMError(f"{size} bytes is more than the limit of {MAX_GRAMMAR_BYTES} for a schema, regex or grammar")


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
    "json": from_schema,
    "regex": bounded(S.regex),
    "grammar": bounded(S.grammar),
    "choice": from_choices,
    "json_object": lambda _: S.json_object(),
}

# request field -> how its value becomes a StructuredOutput (None: the value asks for nothing)
_EXTRA_FIELDS: dict[str, Callable[[Any], StructuredOutput | None]] = {
    "guided_json": from_schema,
    "guided_regex": bounded(S.regex),
    "guided_grammar": bounded(S.grammar),
    "guided_choice": from_choices,
    "structured_outputs": _structured_outputs,
    "json_schema": from_schema,
    "grammar": bounded(S.grammar),
}


def _response_format(value: Any) -> StructuredOutput | None:
    """OpenAI's response_format: {"type": "text"}, {"type": "json_object"} or
    {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}; and llama.cpp's
    {"type": "json_object", "schema": {...}}, held to its schema."""
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return S.json_object() if value.get("schema") is None else from_schema(value["schema"])
    if kind != "json_schema":
        raise TinyLLMError(f'response_format type must be "text", "json_object" or "json_schema", got {kind!r}')
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise TinyLLMError("response_format json_schema must be an object with a name (and a schema)")
    if spec.get("strict") not in (None, True, False):
        raise TinyLLMError(f"response_format json_schema.strict must be a bool, got {spec['strict']!r}")
    # strict or not, the output is held to the schema: a constraint that may be broken is no constraint; strict
    # also closes the objects that do not say whether they take other keys, as OpenAI's strict mode does
    if spec.get("schema") is None:
        return S.json_object()
    return from_schema(spec["schema"], strict=spec.get("strict") is True)


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
            raise bad_request(f"{name}: {clip(str(exc))}", name) from None
        except RecursionError:  # a recursive check or conversion met a structure deeper than it can follow
            raise bad_request(f"{name} nests too deeply to be read", name) from None
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
        raise bad_request(clip(str(exc)), field) from None
    except RecursionError:
        raise bad_request(f"{field}: {structured.describe()} nests too deeply to be compiled", field) from None
