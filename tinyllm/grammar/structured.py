"""StructuredOutput: what a constrained request's text must be — a JSON object, JSON matching a schema, a
regex's full match, or a sentence of a grammar (Lark; GBNF is converted to Lark).

Kept in SamplingParams as a frozen, hashable value. Construction checks everything that needs no vocabulary,
before anything is compiled: the spec's size and shape (spec_limits.py: bytes, schema depth and object count),
that a schema has a finite instance and a grammar a finite sentence (finite.py). A schema given as a dict or as
JSON text is stored as the JSON text the grammar engine compiles: keys in the order given (they fix the order
of the generated properties), strict objects closed and numbers bounded (schema_rewrite.py). The grammar
engine compiles it (constraint.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tinyllm.errors import TinyLLMError
from tinyllm.grammar.finite import check_grammar_finite, check_schema_finite
from tinyllm.grammar.schema_rewrite import free_object, rewritten
from tinyllm.grammar.spec_limits import check_json_text_shape, check_json_value_shape, check_spec_size

KINDS = ("json_object", "json_schema", "regex", "grammar")
JSON_KINDS = ("json_object", "json_schema")


@dataclass(frozen=True)
class StructuredOutput:
    """`kind` is one of KINDS; `spec` is the schema (JSON text or a dict), the regex or the grammar text (empty
    for json_object). `strict` (json_schema only) closes every object schema that does not state
    `additionalProperties`, as OpenAI's strict mode does; `bounded_numbers` (json_object and json_schema, on by
    default) keeps integers within int64 and numbers within what a float64 carries (schema_rewrite.py says
    exactly what is allowed; a schema's own bounds are kept)."""

    kind: str
    spec: str = ""
    strict: bool = False
    bounded_numbers: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TinyLLMError(f"structured output kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        for name in ("strict", "bounded_numbers"):
            if not isinstance(getattr(self, name), bool):
                raise TinyLLMError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.strict and self.kind != "json_schema":
            raise TinyLLMError(f"strict applies to a json_schema constraint only, not to a {self.kind}")
        if not self.bounded_numbers and self.kind not in JSON_KINDS:
            raise TinyLLMError(f"bounded_numbers applies to JSON constraints only, not to a {self.kind}")
        object.__setattr__(self, "spec", _normalised_spec(self.kind, self.spec, self.strict, self.bounded_numbers))

    @classmethod
    def json_object(cls, bounded_numbers: bool = True) -> StructuredOutput:
        return cls("json_object", bounded_numbers=bounded_numbers)

    @classmethod
    def json_schema(cls, schema: dict | str, strict: bool = False, bounded_numbers: bool = True) -> StructuredOutput:
        """`strict=True`: an object schema that does not state `additionalProperties` (or
        `unevaluatedProperties`) is closed — `additionalProperties: false` is written into the stored spec — so
        only its named properties may appear, as in OpenAI's strict mode; `allOf` branches stay open.
        `bounded_numbers=False` lets integers and numbers take any length, as the schema alone allows."""
        return cls("json_schema", schema, strict=strict, bounded_numbers=bounded_numbers)

    @classmethod
    def regex(cls, pattern: str) -> StructuredOutput:
        return cls("regex", pattern)

    @classmethod
    def grammar(cls, text: str) -> StructuredOutput:
        return cls("grammar", text)

    @property
    def schema_text(self) -> str:
        """The JSON schema the grammar engine compiles for a json_object or json_schema constraint."""
        if self.kind == "json_schema":
            return self.spec
        if self.kind == "json_object":
            return json.dumps(free_object()) if self.bounded_numbers else '{"type": "object"}'
        raise TinyLLMError(f"a {self.kind} constraint has no JSON schema")

    def describe(self) -> str:
        """A short name for errors: 'the json_schema', 'the regex', ..."""
        return f"the {self.kind}"


def _normalised_spec(kind: str, spec: Any, strict: bool, bounded_numbers: bool) -> str:
    if kind == "json_object":
        if spec not in ("", None):
            raise TinyLLMError(f"a json_object constraint takes no spec, got {spec!r}")
        return ""
    if kind == "json_schema":
        return _schema_text(spec, strict, bounded_numbers)
    if not isinstance(spec, str) or not spec:
        raise TinyLLMError(f"a {kind} constraint needs a non-empty string, got {spec!r}")
    check_spec_size(kind, spec)
    if kind == "grammar":
        _check_grammar(spec)
    return spec


def _schema_text(spec: Any, strict: bool, bounded_numbers: bool) -> str:
    """A JSON schema as the JSON text to compile; it must be a JSON object (a dict) or the text of one."""
    if isinstance(spec, str):
        check_spec_size("json_schema", spec)
        check_json_text_shape(spec)  # before parsing: a document nested 100,000 deep is refused unread
        text = spec
    else:
        check_json_value_shape(spec)
        text = _dumps(spec)
        check_spec_size("json_schema", text)
    try:
        schema = json.loads(text)  # our own copy: the rewrite changes it in place
    except json.JSONDecodeError as exc:
        raise TinyLLMError(f"the json_schema is not valid JSON ({exc})") from None
    except RecursionError:  # past the shape check only if the limit were raised near the interpreter's
        raise TinyLLMError("the json_schema nests too deep to read") from None
    if isinstance(schema, bool):
        schema = {} if schema else {"not": {}}  # JSON Schema's true / false schemas
    if not isinstance(schema, dict):
        raise TinyLLMError(f"the json_schema must be a JSON object, got {type(schema).__name__}")
    schema = rewritten(schema, strict, bounded_numbers)
    check_schema_finite(schema)
    return _dumps(schema)


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=False)  # sized as sent: UTF-8 bytes, not escapes
    except (TypeError, ValueError) as exc:
        raise TinyLLMError(f"the json_schema cannot be written as JSON ({exc})") from None


def _check_grammar(text: str) -> None:
    """A grammar with no finite sentence is refused; GBNF is read as the Lark it converts to (a GBNF grammar the
    converter refuses is left for the compiler to name)."""
    if "::=" in text:
        from llguidance.gbnf_to_lark import gbnf_to_lark

        try:
            text = gbnf_to_lark(text)
        except Exception:  # the converter raises plain exceptions on bad GBNF
            return
    check_grammar_finite(text)
