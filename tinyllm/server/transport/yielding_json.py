"""JSON text parsed in Python bytecode, so that other threads (the event loop) run while a big body parses.

`json.loads` runs in C and holds the GIL for the whole parse: moving it to a worker thread does not help, and
10 MB of small values (`[[],[],...]`, token ids, chat messages) freezes the event loop for a second or more.
Here the arrays and objects are walked by json's own pure-Python scanner, which releases the GIL between values
(each string and number is still read in C: one value at a time). It is several times slower than `json.loads`,
so only bodies above a size take it. The nesting depth is counted as the walk goes, so no bracket-counting pass
over the raw text (a regex that would also hold the GIL) is needed first.
"""

from __future__ import annotations

import json
from json.decoder import JSONArray, JSONObject
from json.scanner import py_make_scanner


class TooDeep(ValueError):
    """Arrays and objects nest deeper than the limit."""


def loads_yielding(raw: bytes, max_depth: int) -> object:
    """`raw` parsed as `json.loads` would; TooDeep past `max_depth` levels of arrays and objects, ValueError
    (JSONDecodeError or UnicodeDecodeError) for text that is not JSON."""
    text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    return _DepthDecoder(max_depth).decode(text)


class _DepthDecoder(json.JSONDecoder):
    def __init__(self, max_depth: int):
        super().__init__()
        self.max_depth, self.depth = max_depth, 0
        self.parse_object, self.parse_array = self._nested(JSONObject), self._nested(JSONArray)
        self.scan_once = py_make_scanner(self)  # the Python scanner, built over the two counting parsers

    def _nested(self, parse):
        def nested(*args, **kwargs):
            self.depth += 1
            try:
                if self.depth > self.max_depth:
                    raise TooDeep(f"arrays and objects nest deeper than {self.max_depth} levels")
                return parse(*args, **kwargs)
            finally:
                self.depth -= 1

        return nested
