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
from itertools import count

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
    numbers = count(1)
    group_symbol = lambda bracket: (name, index, next(numbers), bracket)  # the n-th group of this definition
    i = 0
    while i < len(body):
        if body[i][0] == "punct":
            i = _punctuation(rules, stack, body, i, group_symbol)
        else:
            i = _item(stack[-1][1][-1], body, i, json_reason)
        i += 1
    if len(stack) != 1:
        raise _Unknown
    _add_alternatives(rules, name, stack[0][1])


def _followed_by(body: list[tuple[str, str]], i: int, *kinds: str) -> bool:
    """Whether the tokens after body[i] start with tokens of these kinds."""
    return i + len(kinds) < len(body) and all(body[i + 1 + k][0] == kind for k, kind in enumerate(kinds))


def _item(items: list, body: list[tuple[str, str]], i: int, json_reason) -> int:
    """The item at body[i] (a name, a terminal, an inline schema; an alias adds none) appended to `items`;
    returns the index of its last token."""
    kind, value = body[i]
    if kind == "name":
        items.append(value)
    elif kind == "json":
        reason = json_reason(value)
        items.append(_TERMINAL if reason is None else ("%json", reason))
    elif kind in ("string", "regex", "special", "terminal", "grammar"):
        items.append(_TERMINAL)
        if kind == "string" and _followed_by(body, i, "range", "string"):
            return i + 2
    elif kind == "arrow":
        if not _followed_by(body, i, "name"):
            raise _Unknown
        return i + 1  # an alias names the tree node only
    else:
        raise _Unknown
    return i


def _punctuation(rules: Rules, stack: list, body: list[tuple[str, str]], i: int, group_symbol) -> int:
    """An alternative's bar, a group's bracket or a quantifier at body[i]; returns the index of its last token.
    `group_symbol(bracket)` names a group that opens here."""
    value = body[i][1]
    if value == "|":
        stack[-1][1].append([])
    elif value in "([":
        stack.append((group_symbol(value), [[]]))
    elif value in ")]":
        symbol, alternatives = stack.pop()
        if len(stack) == 0 or symbol[3] != {")": "(", "]": "["}[value]:
            raise _Unknown
        _add_alternatives(rules, symbol, alternatives)
        stack[-1][1][-1].append(_TERMINAL if value == "]" else symbol)
    elif value in "?*+~{":
        return _quantify(body, i, stack[-1][1][-1])
    else:
        raise _Unknown
    return i


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
    low, end = _tilde_count(body, i) if value == "~" else _brace_count(body, i)
    if low == 0:
        items[-1] = _TERMINAL
    return end


def _tilde_count(body: list[tuple[str, str]], i: int) -> tuple[int, int]:
    """`~n` or `~n..m` at body[i]: the least count n, and the index of its last token."""
    if not _followed_by(body, i, "number"):
        raise _Unknown
    low, end = int(body[i + 1][1]), i + 1
    if _followed_by(body, end, "range", "number"):
        end += 2
    return low, end


def _brace_count(body: list[tuple[str, str]], i: int) -> tuple[int, int]:
    """`{n}`, `{n,}`, `{,m}` or `{n,m}` at body[i]: the least count, and the index of its closing brace."""
    end = i + 1
    while end < len(body) and body[end][1] != "}":
        if body[end][0] != "number" and body[end][1] != ",":
            raise _Unknown
        end += 1
    if end >= len(body):
        raise _Unknown
    first = body[i + 1]
    return (int(first[1]) if first[0] == "number" else 0), end
