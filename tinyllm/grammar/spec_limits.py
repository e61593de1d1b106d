"""How large a structured-output spec may be: checked on the client's text before anything parses or compiles it.

A schema nested thousands deep, or a grammar of megabytes, costs the JSON reader its recursion limit and the
grammar engine seconds before either can say no; these limits refuse such specs in microseconds.
- MAX_SPEC_BYTES: UTF-8 bytes of a JSON schema or a regex, 64 KiB; of a Lark/GBNF grammar, 256 KiB.
- MAX_SCHEMA_DEPTH: 64 levels of JSON nesting (objects and arrays, the outermost object is level 1) in a
  schema document: 32 levels of nested object properties, or 64 of nested array items. The grammar engine's
  JSON reader stops at 128 levels, and the engine wraps a schema in 3 levels of its own.
- MAX_SCHEMA_OBJECTS: 4,096 JSON objects in a schema document (an upper bound on its subschemas).
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Any

from tinyllm.errors import TinyLLMError

MAX_SPEC_BYTES = {"json_schema": 64 * 1024, "regex": 64 * 1024, "grammar": 256 * 1024}
MAX_SCHEMA_DEPTH = 64
MAX_SCHEMA_OBJECTS = 4096

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def check_spec_size(kind: str, text: str) -> None:
    """TinyLLMError when `text` (a spec of `kind`) has more UTF-8 bytes than MAX_SPEC_BYTES allows."""
    limit = MAX_SPEC_BYTES[kind]
    if len(text) > limit or len(text.encode("utf-8", "surrogatepass")) > limit:
        size = len(text.encode("utf-8", "surrogatepass"))
        raise TinyLLMError(f"the {kind} is {size:,} bytes; at most {limit:,} are allowed")


def check_json_text_shape(text: str) -> None:
    """Depth and object count of a schema given as JSON text, read without parsing it (so a document nested
    100,000 deep costs a regex pass, not a RecursionError). Unbalanced text passes: the parser names it."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    depth = max(accumulate(_DEPTH_STEP[c] for c in brackets), default=0)
    _check_shape(depth, brackets.count("{"), exact=True)


def check_json_value_shape(value: Any) -> None:
    """Depth and object count of a schema given as Python values (dicts, lists, scalars), walked with an explicit
    stack that stops at the first level past the limit (so a cyclic dict is refused, not walked forever)."""
    num_objects, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            num_objects += 1
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        _check_shape(depth, num_objects, exact=False)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))


def _check_shape(depth: int, num_objects: int, exact: bool) -> None:
    """`exact`: the counts are the document's own; else the walk stopped at the first one past a limit."""
    if depth > MAX_SCHEMA_DEPTH:
        found = f"{depth} levels" if exact else f"more than {MAX_SCHEMA_DEPTH} levels"
        raise TinyLLMError(
            f"the json_schema nests {found} of objects and arrays; at most {MAX_SCHEMA_DEPTH} are allowed"
        )
    if num_objects > MAX_SCHEMA_OBJECTS:
        found = f"{num_objects:,}" if exact else f"more than {MAX_SCHEMA_OBJECTS:,}"
        raise TinyLLMError(f"the json_schema has {found} objects; at most {MAX_SCHEMA_OBJECTS:,} are allowed")
