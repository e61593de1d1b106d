"""StructuredOutput: what a constrained request's text must be — a JSON object, JSON matching a schema, a
regex's full match, or a sentence of a grammar (Lark; GBNF is converted to Lark).

Kept in SamplingParams as a frozen, hashable value: a schema given as a dict is stored as its JSON text
(keys in the order given, since they fix the order of the generated properties). The grammar engine
compiles it (constraint.py); this file only checks the shape of the request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tinyllm.errors import TinyLLMError

KINDS = ("json_object", "json_schema", "regex", "grammar")


@dataclass(frozen=True)
class StructuredOutput:
    """`kind` is one of KINDS; `spec` is the schema (JSON text or a dict), the regex or the grammar text
    (empty for json_object)."""

    kind: str
    spec: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TinyLLMError(f"structured output kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        object.__setattr__(self, "spec", _normalised_spec(self.kind, self.spec))

    @classmethod
    def json_object(cls) -> StructuredOutput:
        return cls("json_object")

    @classmethod
    def json_schema(cls, schema: dict | str) -> StructuredOutput:
        return cls("json_schema", schema)

    @classmethod
    def regex(cls, pattern: str) -> StructuredOutput:
        return cls("regex", pattern)

    @classmethod
    def grammar(cls, text: str) -> StructuredOutput:
        return cls("grammar", text)

    def describe(self) -> str:
        """A short name for errors: 'the json_schema', 'the regex', ..."""
        return f"the {self.kind}"


def _normalised_spec(kind: str, spec: Any) -> str:
    if kind == "json_object":
        if spec not in ("", None):
            raise TinyLLMError(f"a json_object constraint takes no spec, got {spec!r}")
        return ""
    if kind == "json_schema":
        return _schema_text(spec)
    if not isinstance(spec, str) or not spec:
        raise TinyLLMError(f"a {kind} constraint needs a non-empty string, got {spec!r}")
    return spec


def _schema_text(spec: Any) -> str:
    """A JSON schema as JSON text; it must be a JSON object (a dict) or the text of one."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise TinyLLMError(f"the json_schema is not valid JSON ({exc})") from None
    if isinstance(spec, bool):
        spec = {} if spec else {"not": {}}  # JSON Schema's true / false schemas
    if not isinstance(spec, dict):
        raise TinyLLMError(f"the json_schema must be a JSON object, got {type(spec).__name__}")
    try:
        return json.dumps(spec)
    except (TypeError, ValueError) as exc:
        raise TinyLLMError(f"the json_schema cannot be written as JSON ({exc})") from None
