"""How deep arrays and objects nest in JSON text, found without parsing it.

The JSON parser, pydantic and every recursive helper after them (schema compilers, tool grammars) recurse once
per level: 2,000 levels in a 4 KB body is a RecursionError, or worse. So the depth is bounded on the raw text
first, in linear passes that run in C: strings are cut out (brackets inside them do not count), the brackets
left become +1 (open) and -1 (close), and the depth is the largest running sum.
"""

from __future__ import annotations

import json
import re

import numpy as np

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = b"[]{}"
_OTHER_BYTES = bytes(b for b in range(256) if b not in _BRACKETS)
_STEPS = bytes.maketrans(_BRACKETS, b"\x01\xff\x01\xff")  # open +1, close -1 (as int8)
_CHUNK = 1 << 20  # brackets summed at a time: bounds the int32 running sums to 4 MB


def nests_deeper_than(text: bytes | str, limit: int) -> bool:
    """Whether arrays and objects in the JSON `text` nest more than `limit` levels deep. Text that is not JSON
    may be answered either way; its parse then fails on its own."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if raw.count(b"[") + raw.count(b"{") <= limit:  # the common case: too few brackets to nest that deep
        return False
    steps = np.frombuffer(_STRING.sub(b"", raw).translate(_STEPS, _OTHER_BYTES), dtype=np.int8)
    depth = 0
    for start in range(0, len(steps), _CHUNK):
        sums = np.cumsum(steps[start : start + _CHUNK], dtype=np.int32) + depth
        if int(sums.max()) > limit:
            return True
        depth = int(sums[-1])
    return False


_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def deep_field(text: bytes, limit: int) -> str | None:
    """The top-level key of the JSON object `text` under which nesting first passes `limit` levels (the object
    itself is the first), or None if that is not a key. For the error message of a body already found too deep:
    it walks every string and bracket up to that point."""
    depth, key = 0, None
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token.startswith(b'"'):
            key = token if depth == 1 else key
        elif token in b"[{":
            depth += 1
            if depth > limit:
                break
        else:
            depth -= 1
    else:
        return None
    try:
        name = json.loads(key) if key is not None else None
    except ValueError:
        return None
    return name if isinstance(name, str) else None
