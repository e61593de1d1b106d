"""The subschemas of a JSON schema document, each named by its JSON pointer ('#', '#/properties/x', ...), found
with an explicit stack (never Python recursion), and the local `$ref`s between them.

Terms: a *position* is a place in the document that holds a subschema (a dict, or a bool: `true` matches
anything, `false` nothing): the root, and the values under the keywords of POSITIVE and OTHER. A local
`$ref` ('#' followed by a JSON pointer, with '~0'/'~1' and %-escapes) names a node anywhere in the document,
under a keyword we know or not ('#/components/schemas/Pet'); its target becomes a node too. A reference that
is not local (another document, an `$id` or an `$anchor`) is left unresolved.

POSITIVE positions are those whose subschemas describe parts of the instance itself: what a rewrite may
tighten (bounded numbers) without widening the schema. The others (`not`, conditions, key names, `contains`)
are walked only to find references.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

# keyword -> shape of its value: "one" subschema, a "map" of name -> subschema, or a "list" of subschemas
POSITIVE = {
    "properties": "map",
    "patternProperties": "map",
    "additionalProperties": "one",
    "items": "one_or_list",  # a list is the tuple form of drafts 4-7
    "prefixItems": "list",
    "additionalItems": "one",
    "anyOf": "list",
    "oneOf": "list",
    "allOf": "list",
    "$defs": "map",
    "definitions": "map",
    "dependentSchemas": "map",
    "unevaluatedProperties": "one",
    "unevaluatedItems": "one",
}
OTHER = {"not": "one", "if": "one", "then": "one", "else": "one", "contains": "one", "propertyNames": "one"}


def pointer(tokens: tuple[str, ...]) -> str:
    return "#" + "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


def children(node: Any, positive_only: bool = False) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path below `node`, subschema) for each subschema position directly under a dict `node`."""
    if not isinstance(node, dict):
        return
    for table in (POSITIVE,) if positive_only else (POSITIVE, OTHER):
        for keyword, shape in table.items():
            if keyword in node:
                yield from _under(keyword, shape, node[keyword])


def _under(keyword: str, shape: str, value: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, subschema) for each subschema in a keyword's value, read as the shape its keyword gives it."""
    if isinstance(value, (dict, bool)) and shape in ("one", "one_or_list"):
        yield (keyword,), value
        return
    if isinstance(value, dict) and shape == "map":
        entries = value.items()
    elif isinstance(value, list) and shape in ("list", "one_or_list"):
        entries = enumerate(value)
    else:
        return
    for token, child in entries:
        if isinstance(child, (dict, bool)):
            yield (keyword, str(token)), child


@dataclass
class SchemaNodes:
    """Every subschema of `root` by pointer, with where it is held (`holders[p] = (container, key)`, so a bool
    subschema can be replaced), the keyword it was found under (`via`: '' for the root, '$ref' for a target
    reached only by reference) and the pointer each local `$ref` resolves to."""

    root: dict
    positive_only: bool = False
    nodes: dict[str, Any] = field(default_factory=dict)
    holders: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    via: dict[str, str] = field(default_factory=dict)
    refs: dict[str, str | None] = field(default_factory=dict)  # pointer -> its $ref's target (None: unresolved)

    def __post_init__(self) -> None:
        holder = {"": self.root}
        stack = [((), holder, "", "")]
        while stack:
            tokens, container, key, via = stack.pop()
            name = pointer(tokens)
            if name in self.nodes:
                if via != "$ref":  # found by reference first: the keyword it sits under wins
                    self.via[name] = via
                continue
            node = container[key]
            self.nodes[name], self.holders[name], self.via[name] = node, (container, key), via
            for sub, _child in children(node, self.positive_only):
                parent = node[sub[0]] if len(sub) > 1 else node
                stack.append((tokens + sub, parent, _key(parent, sub[-1]), sub[0]))
            ref = node.get("$ref") if isinstance(node, dict) else None
            if isinstance(ref, str):
                target = self._resolve(ref)
                self.refs[name] = None if target is None else pointer(target[0])
                if target is not None:
                    stack.append((*target, "$ref"))

    def _resolve(self, ref: str):
        """(tokens, container, key) of a local reference's target, or None."""
        if not ref.startswith("#") or (len(ref) > 1 and ref[1] != "/"):
            return None
        tokens = tuple(unquote(t).replace("~1", "/").replace("~0", "~") for t in ref[2:].split("/")) if ref[1:] else ()
        container, key = {"": self.root}, ""
        for token in tokens:
            value = container[key]
            if isinstance(value, dict) and token in value:
                container, key = value, token
            elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
                container, key = value, int(token)
            else:
                return None
        return (tokens, container, key) if isinstance(container[key], (dict, bool)) else None


def _key(parent: Any, token: str) -> Any:
    return int(token) if isinstance(parent, list) else token
