"""What can never finish: a JSON schema with no finite instance, a grammar with no finite sentence, a compiled
constraint whose language is empty. Refused before a request runs, since the grammar engine would otherwise
let the model write until max_tokens (`start: "a" start`) or stall on a schema that contains itself.

Both checks are a productivity fixpoint: a symbol *finishes* when every part of one of its rules finishes,
solved by forward chaining (each rule counts its parts not yet known to finish), in time linear in the rules.
Whatever a check does not understand counts as finishing, so a spec is refused only when there is certainly
no finite text; the grammar engine still judges everything else.

Schema rules (schema_nodes.py names each subschema by its JSON pointer): a subschema finishes when its `$ref`
target, each `allOf` branch, one `anyOf` branch, one `oneOf` branch and one of its types finish; `true`, a
schema with `const` or `enum`, and a scalar type finish at once; an object needs its required properties
(`additionalProperties: false` and no such property: never), an array its first `minItems` items; `false`
never finishes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tinyllm.errors import TinyLLMError
from tinyllm.grammar.fixpoint import NEVER, Chain, Rules
from tinyllm.grammar.lark_rules import lark_rules
from tinyllm.grammar.schema_nodes import SchemaNodes
from tinyllm.grammar.spec_limits import check_json_text_shape


def check_schema_finite(schema: dict) -> None:
    """TinyLLMError when the JSON schema (local references resolved) has no finite instance."""
    reason = infinite_schema_reason(schema)
    if reason is not None:
        raise TinyLLMError(f"the json_schema has no finite instance: {reason}")


def infinite_schema_reason(schema: dict) -> str | None:
    """Why the JSON schema has no finite instance, or None when it may have one."""
    walk = SchemaNodes(schema)
    rules = Rules()
    for name, node in walk.nodes.items():
        _schema_rules(rules, name, node, walk)
    done = rules.finishing()
    return None if "#" in done else _explain(rules.blame("#", done))


def _explain(chain: Chain) -> str:
    """The labelled steps of the chain's cycle (or of all of it, at a dead end), references left out when other
    steps say more."""
    steps = chain.steps
    if chain.is_cycle:
        steps = steps[[symbol for symbol, _ in steps].index(chain.end) :]
    labels = [label for _, label in steps if label]
    said = [label for label in labels if " refers to " not in label] or labels
    said = said[:3] + ["..."] * (len(said) > 3)
    if chain.is_cycle:
        if said in ([], [f"{chain.end} refers to {chain.end}"]):
            return f"{chain.end} refers to itself"
        return f"{', '.join(said)}, which leads back to {chain.end}"
    if chain.end == NEVER:
        return ", ".join(said)
    return f"{', '.join(said)} and {chain.end} matches nothing" if said else f"{chain.end} matches nothing"


def _schema_rules(rules: Rules, name: str, node, walk: SchemaNodes) -> None:
    if node is True:
        rules.add(name)
        return
    if not isinstance(node, dict):  # false: no rule
        return
    parts: list = []
    if walk.refs.get(name) is not None:
        parts.append((walk.refs[name], f"{name} refers to {walk.refs[name]}"))
    all_of = node.get("allOf")
    parts += [(f"{name}/allOf/{i}", None) for i in range(len(all_of) if isinstance(all_of, list) else 0)]
    for keyword in ("anyOf", "oneOf"):
        branches = node.get(keyword)
        if isinstance(branches, list):
            for i in range(len(branches)):
                rules.add((name, keyword), _known([(f"{name}/{keyword}/{i}", None)], walk))
            parts.append(((name, keyword), None))
    for type_parts in _type_parts(name, node):
        rules.add((name, "type"), _known(type_parts, walk))
    rules.add(name, _known(parts, walk) + [((name, "type"), None)])


def _known(parts: list, walk: SchemaNodes) -> list:
    """The parts that are subschemas (a value that is no schema, which the grammar engine names, is not judged)."""
    return [(symbol, label) for symbol, label in parts if not isinstance(symbol, str) or symbol in walk.nodes]


def _type_parts(name: str, node: dict) -> list[list[tuple[str, str]]]:
    """One list of parts per type the node allows (a scalar type: no parts)."""
    if "const" in node or "enum" in node:
        return [[]]
    declared = node.get("type")
    types = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else None
    if types is None:
        return [[]]  # an untyped schema allows null
    out = []
    for t in types:
        if t == "object":
            out.append(_object_parts(name, node))
        elif t == "array":
            out.append(_array_parts(name, node))
        else:
            out.append([])
    return out


def _object_parts(name: str, node: dict) -> list:
    required, properties = node.get("required"), node.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    parts = []
    for key in required if isinstance(required, list) else ():
        if key in properties:
            parts.append((f"{name}/properties/{_escape(key)}", f"property {key!r} of {name} is required"))
        elif node.get("patternProperties"):
            continue  # a pattern may take it: not judged here
        elif node.get("additionalProperties") is False:
            parts.append((NEVER, f"property {key!r} of {name} is required but the object allows no such property"))
        elif isinstance(node.get("additionalProperties"), dict):
            parts.append((f"{name}/additionalProperties", f"property {key!r} of {name} is required"))
    return parts


def _array_parts(name: str, node: dict) -> list:
    min_items = node.get("minItems", 0)
    if not isinstance(min_items, int) or isinstance(min_items, bool) or min_items <= 0:
        return []
    prefix = node.get("prefixItems") if isinstance(node.get("prefixItems"), list) else []
    items = node.get("items")
    parts = []
    for i in range(min(min_items, len(prefix) + 1)):
        if i < len(prefix):
            parts.append((f"{name}/prefixItems/{i}", f"item {i} of {name} is required (minItems {min_items})"))
        elif isinstance(items, (dict, bool)):
            parts.append((f"{name}/items", f"items of {name} are required (minItems {min_items})"))
    return parts


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def check_grammar_finite(text: str) -> None:
    """TinyLLMError when a Lark grammar (GBNF already converted) certainly has no finite sentence, its inline
    `%json` schemas included; a grammar whose syntax the reader does not follow is left to the grammar engine."""
    parsed = lark_rules(text, _json_reason)
    if parsed is None:
        return
    rules, start = parsed
    done = rules.finishing()
    if start in done:
        return
    stuck = [s for s in _reachable(rules, start) if s not in done]
    names = [s for s in stuck if isinstance(s, str)]
    schemas = [s[1] for s in stuck if isinstance(s, tuple) and s[0] == "%json"]
    if schemas:
        raise TinyLLMError(
            f"the grammar has no finite sentence: rule {start!r} needs a %json schema with no finite instance "
            f"({schemas[0]})"
        )
    if len(names) == 1:
        raise TinyLLMError(
            f"the grammar has no finite sentence: rule {start!r} never finishes, as each of its alternatives "
            f"needs {start!r} again"
        )
    raise TinyLLMError(
        f"the grammar has no finite sentence: rules {', '.join(map(repr, names))} never finish, as each of "
        "their alternatives needs one of them again"
    )


def _json_reason(text: str) -> str | None:
    """Why an inline `%json` schema has no finite instance; None when it may have one or cannot be read here
    (the grammar engine names what is wrong with it)."""
    try:
        check_json_text_shape(text)
        schema = json.loads(text)
    except (TinyLLMError, ValueError, RecursionError):
        return None
    return infinite_schema_reason(schema) if isinstance(schema, dict) else None


def _reachable(rules: Rules, start) -> list:
    """The symbols reachable from `start` through rules whose head does not finish, in the order found."""
    parts_of: dict = {}
    for head, parts in rules.rules:
        parts_of.setdefault(head, []).extend(symbol for symbol, _ in parts)
    found, stack = {start: None}, [start]
    while stack:
        for symbol in parts_of.get(stack.pop(), ()):
            if symbol not in found:
                found[symbol] = None
                stack.append(symbol)
    return list(found)


def is_empty_language(matcher, stop_ids: Sequence[int]) -> bool:
    """True when a compiled matcher certainly accepts no text: at its start it is not accepting and its first
    mask allows no token but the stop ids (a regex such as `[^\\s\\S]`). A language that empties only after
    its first token is not seen here, and a grammar whose text must begin with a stop token reads as empty.
    Works on a copy: computing the first mask of an empty language leaves a matcher in an error state."""
    probe = matcher.deep_copy()
    if probe.is_accepting():
        return False
    bits = bytes(probe.compute_bitmask())
    stops = set(stop_ids)
    for word_index in range(0, len(bits), 4):
        word = int.from_bytes(bits[word_index : word_index + 4], "little")
        while word:
            low = word & -word
            token = word_index * 8 + low.bit_length() - 1
            if token not in stops:
                return False
            word ^= low
    return True
