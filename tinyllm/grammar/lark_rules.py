"""A tolerant reader of Lark grammars (llguidance's dialect) into productivity rules (fixpoint.py), without
recursion: `lark_rules(text)` gives the rules and the start symbol, or None for any syntax it does not follow
(the grammar engine judges those grammars alone).

Read: definitions at the start of a line (`name:`, `?name:`, `!name:`, `name.2:`, `name[lazy]:`), continued on
indented lines or lines that start with `|`; alternatives `|`; groups `( )` and `[ ]`; quantifiers `? * +`,
`~n`, `~n..m`, `{n}`, `{n,m}`; strings and ranges `"a".."z"`, regexes `/.../`, special tokens `<...>`, inline
`%regex {...}` and `@grammar` references (terminals that finish), inline `%json {...}` schemas (which finish
unless `json_reason`, given the schema's text, names why it has no finite instance: such a schema becomes the
symbol ("%json", reason), which has no rule); `-> alias`; comments `//` and `#`; directives (`%import`,
`%ignore`, `%llguidance {...}`) are skipped. A name defined nowhere (an import)
counts as finishing. A definition that uses `&` or a prefix `~` (intersection, negation of terminals) counts as
finishing: its language is not judged here.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tinyllm.grammar.fixpoint import Rules

_HEADER = re.compile(r"([?!]?)([_a-zA-Z][\w\-]*)(?:\.-?\d+)?(?:\[[^\]\n]*\])?[ \t]*:(?!:)")
_TOKEN = re.compile(
    r"""(?P<space>[ \t\r]+)|(?P<newline>\n)|(?P<comment>(?://|\#)[^\n]*)
    |(?P<string>"(?:[^"\\\n]|\\.)*"i?)|(?P<regex>/(?![/*])(?:[^/\\\n]|\\.)+/[imslux]*)|(?P<special><[^<>\n]*>)
    |(?P<directive>%[a-zA-Z_]+)|(?P<grammar>@[\w\-]+)|(?P<arrow>->)|(?P<name>[_a-zA-Z][\w\-]*)|(?P<number>\d+)
    |(?P<range>\.\.)|(?P<punct>[:|()\[\]?*+~{},&=])""",
    re.VERBOSE,
)
_TERMINAL = object()  # an item that finishes by itself
_START = "start"


class _Unknown(Exception):
    """Syntax this reader does not follow."""


def lark_rules(text: str, json_reason: Callable[[str], str | None] = lambda _: None) -> tuple[Rules, str] | None:
    try:
        definitions = _definitions(text)
    except _Unknown:
        return None
    if not any(name == _START for name, _ in definitions):
        return None
    rules = Rules()
    try:
        for index, (name, body) in enumerate(definitions):
            _add_definition(rules, name, body, index, json_reason)
    except _Unknown:
        return None
    defined = {name for name, _ in definitions}
    for name in {s for _, parts in rules.rules for s, _ in parts if isinstance(s, str)} - defined:
        rules.add(name)  # imported, or an error the grammar engine names
    return rules, _START


def _definitions(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """(name, body tokens) per definition; directives and comments dropped."""
    out: list[tuple[str, list]] = []
    pos, line_start = 0, True
    while pos < len(text):
        if line_start:
            header = _HEADER.match(text, pos)
            if header:
                out.append((header.group(2), []))
                pos, line_start = header.end(), False
                continue
            if text.startswith("%", pos):  # a directive line: its JSON block (if any) or the rest of the line
                pos = _skip_directive(text, pos)
                continue
        match = _TOKEN.match(text, pos)
        if match is None:
            raise _Unknown
        kind, value = match.lastgroup, match.group()
        pos, line_start = match.end(), kind == "newline"
        if kind in ("space", "newline", "comment"):
            continue
        if kind == "directive":
            if value not in ("%json", "%regex"):
                raise _Unknown
            start, pos = pos, _skip_json_block(text, pos)
            kind, value = ("json", text[start:pos].strip()) if value == "%json" else ("terminal", value)
        if not out:
            raise _Unknown  # a body before any definition
        out[-1][1].append((kind, value))
    return out


def _skip_directive(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    brace = text.find("{", pos, len(text) if end < 0 else end)
    if brace >= 0:
        return _skip_json_block(text, brace)
    return len(text) if end < 0 else end + 1


def _skip_json_block(text: str, pos: int) -> int:
    """The position after the balanced {...} that starts at the first non-space character from `pos`."""
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    if pos >= len(text) or text[pos] != "{":
        raise _Unknown
    depth, in_string, escaped = 0, False, False
    for i in range(pos, len(text)):
        c = text[i]
        if in_string:
            escaped, in_string = (False, True) if escaped else (c == "\\", c != '"')
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    raise _Unknown


def _add_definition(rules: Rules, name: str, body: list[tuple[str, str]], index: int, json_reason) -> None:
    """Rules for one definition: one per alternative, groups as symbols of their own."""
    negation = any(v == "~" and (j + 1 == len(body) or body[j + 1][0] != "number") for j, (_, v) in enumerate(body))
    if negation or ("punct", "&") in body:
        rules.add(name)  # an intersection or negation of terminals: not judged
        return
    stack = [(name, [[]])]  # open groups: (symbol, alternatives of items)
    num_groups, i = 0, 0
    while i < len(body):
        kind, value = body[i]
        items = stack[-1][1][-1]
        if kind == "name":
            items.append(value)
        elif kind == "json":
            reason = json_reason(value)
            items.append(_TERMINAL if reason is None else ("%json", reason))
        elif kind in ("string", "regex", "special", "terminal", "grammar"):
            items.append(_TERMINAL)
            if kind == "string" and i + 2 < len(body) and body[i + 1][0] == "range" and body[i + 2][0] == "string":
                i += 2
        elif kind == "arrow":
            if i + 1 >= len(body) or body[i + 1][0] != "name":
                raise _Unknown
            i += 1  # an alias names the tree node only
        elif value == "|":
            stack[-1][1].append([])
        elif value in "([":
            num_groups += 1
            stack.append(((name, index, num_groups, value), [[]]))
        elif value in ")]":
            symbol, alternatives = stack.pop()
            if len(stack) == 0 or symbol[3] != {")": "(", "]": "["}[value]:
                raise _Unknown
            _add_alternatives(rules, symbol, alternatives)
            stack[-1][1][-1].append(_TERMINAL if value == "]" else symbol)
        elif value in "?*+~{":
            i = _quantify(body, i, items)
        else:
            raise _Unknown
        i += 1
    if len(stack) != 1:
        raise _Unknown
    _add_alternatives(rules, name, stack[0][1])


def _add_alternatives(rules: Rules, symbol, alternatives: list[list]) -> None:
    for items in alternatives:
        rules.add(symbol, [(item, None) for item in items if item is not _TERMINAL])


def _quantify(body: list[tuple[str, str]], i: int, items: list) -> int:
    """Apply the quantifier at body[i] to the last item; returns the index of its last token."""
    value = body[i][1]
    if not items:
        raise _Unknown
    if value in "?*":
        items[-1] = _TERMINAL
        return i
    if value == "+":
        return i
    if value == "~":  # ~n or ~n..m
        if i + 1 >= len(body) or body[i + 1][0] != "number":
            raise _Unknown
        low, end = int(body[i + 1][1]), i + 1
        if end + 2 < len(body) and body[end + 1][0] == "range" and body[end + 2][0] == "number":
            end += 2
    else:  # {n}, {n,}, {,m}, {n,m}
        end = i + 1
        while end < len(body) and body[end][1] != "}":
            if body[end][0] != "number" and body[end][1] != ",":
                raise _Unknown
            end += 1
        if end >= len(body):
            raise _Unknown
        first = body[i + 1]
        low = int(first[1]) if first[0] == "number" else 0
    if low == 0:
        items[-1] = _TERMINAL
    return end
