"""What a JSON schema becomes before it is stored: strict objects closed, and numbers bounded.

Strict (`strict=True`, as OpenAI's strict mode): an object schema (type "object", or no type and object keywords
such as `properties`) that states neither `additionalProperties` nor `unevaluatedProperties` gets
`additionalProperties: false`: only its named properties may appear. The branches of an `allOf` are left
open, since each describes only part of the object.

Bounded numbers (the default; `bounded_numbers=False` turns it off), so that every JSON consumer reads a
finished answer's numbers as an int64 / a finite float64:
- an integer (type "integer") lies in [INTEGER_MIN, INTEGER_MAX] = [-(2**63 - 1024), 2**63 - 1024]: the
  widest range inside int64 that the grammar engine, which reads bounds as float64, can state exactly;
- a number (type "number", or a number in a value of free form) is written without an exponent, with at most
  15 digits before the point (-1e15 < x < 1e15) and at most 6 after it (a multiple of 1e-6, as C's %f writes
  it); with at most 15 digits in all, it is exactly the float64 it parses to.
A side of the range the schema states itself (`minimum` or `exclusiveMinimum`, `maximum` or
`exclusiveMaximum`), and its own `multipleOf`, are kept as they are; only what it leaves open gets the default.
Values of free form (`{}`, `true`, a schema of annotations only, an object's unstated `additionalProperties`,
an array's unstated `items`) become a reference to a `$defs` entry, `json_value`: any JSON value, numbers
bounded. Not rewritten: subschemas under `not`, `if`/`then`/`else`, `contains` and `propertyNames`; schemas
with `enum` or `const`; free-form parts of `allOf` branches; and schemas that name no type and hold keywords
other than object keywords (their numbers are the grammar engine's, unbounded).
"""

from __future__ import annotations

from tinyllm.grammar.schema_nodes import SchemaNodes

INTEGER_MIN, INTEGER_MAX = -(2**63 - 1024), 2**63 - 1024
NUMBER_LIMIT = 1e15  # exclusive, both signs
NUMBER_STEP = 1e-6

_ANNOTATIONS = {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}
_OBJECT_KEYWORDS = ("properties", "required", "patternProperties", "minProperties", "maxProperties")
_FREE_VALUE = "json_value"


def free_value(ref: str) -> dict:
    """Any JSON value with bounded numbers; `ref` points back at this schema (for the values inside it)."""
    return {
        "type": ["null", "boolean", "number", "string", "array", "object"],
        "exclusiveMinimum": -NUMBER_LIMIT,
        "exclusiveMaximum": NUMBER_LIMIT,
        "multipleOf": NUMBER_STEP,
        "items": {"$ref": ref},
        "additionalProperties": {"$ref": ref},
    }


def free_object() -> dict:
    """Any JSON object with bounded numbers (what a json_object constraint compiles)."""
    ref = f"#/$defs/{_FREE_VALUE}"
    return {**free_value(ref), "type": "object", "$defs": {_FREE_VALUE: free_value(ref)}}


def rewritten(schema: dict, strict: bool, bounded_numbers: bool) -> dict:
    """`schema` (a dict the caller owns, changed in place) with strict objects closed and numbers bounded."""
    if not strict and not bounded_numbers:
        return schema
    free = _FreeValue.of(schema) if bounded_numbers else None
    walk = SchemaNodes(schema, positive_only=True)
    for name, node in walk.nodes.items():
        in_all_of = walk.via[name] == "allOf"
        fill = None if in_all_of else free
        if node is True and fill is not None:
            container, key = walk.holders[name]
            container[key] = {"$ref": fill.ref()}
        elif isinstance(node, dict):
            _rewrite_node(node, strict and not in_all_of, fill, bounded_numbers)
    if free is not None:
        free.store()
    return schema


def _rewrite_node(node: dict, close: bool, free: _FreeValue | None, bound: bool) -> None:
    if free is not None and all(k in _ANNOTATIONS for k in node):
        node["$ref"] = free.ref()
        return
    types = _types(node)
    is_object = "object" in types if types is not None else any(k in node for k in _OBJECT_KEYWORDS)
    if is_object and "additionalProperties" not in node and "unevaluatedProperties" not in node:
        if close:
            node["additionalProperties"] = False
        elif free is not None:
            node["additionalProperties"] = {"$ref": free.ref()}
    if types is not None and "array" in types and "items" not in node and free is not None:
        node["items"] = {"$ref": free.ref()}
    if not bound or types is None or "enum" in node or "const" in node:
        return
    if "number" in types:
        _fill(node, ("minimum", "exclusiveMinimum"), "exclusiveMinimum", -NUMBER_LIMIT)
        _fill(node, ("maximum", "exclusiveMaximum"), "exclusiveMaximum", NUMBER_LIMIT)
        node.setdefault("multipleOf", NUMBER_STEP)
    elif "integer" in types:
        _fill(node, ("minimum", "exclusiveMinimum"), "minimum", INTEGER_MIN)
        _fill(node, ("maximum", "exclusiveMaximum"), "maximum", INTEGER_MAX)


def _types(node: dict) -> set[str] | None:
    declared = node.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    return None


def _fill(node: dict, side: tuple[str, str], keyword: str, value: float) -> None:
    """Give one side of the range its default unless the schema states that side (either keyword present)."""
    if not any(k in node for k in side):
        node[keyword] = value


class _FreeValue:
    """The `$defs` entry that free-form values point at: stored on first use, and reused when the schema already
    holds it (so rewriting a rewritten schema changes nothing)."""

    def __init__(self, schema: dict, defs: dict):
        self.schema, self.defs, self.used = schema, defs, False
        self.name, n = _FREE_VALUE, 1
        while self.name in defs and defs[self.name] != free_value(f"#/$defs/{self.name}"):
            n += 1
            self.name = f"{_FREE_VALUE}_{n}"

    @classmethod
    def of(cls, schema: dict) -> _FreeValue | None:
        """None when the schema's `$defs` is not an object (there is nowhere to keep the entry)."""
        defs = schema.get("$defs", {})
        return cls(schema, defs) if isinstance(defs, dict) else None

    def ref(self) -> str:
        self.used = True
        return f"#/$defs/{self.name}"

    def store(self) -> None:
        if self.used:
            self.schema["$defs"] = {**self.defs, self.name: free_value(f"#/$defs/{self.name}")}
