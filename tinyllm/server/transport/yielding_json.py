"""JSON text parsed so that other threads (the event loop) run while a big body parses.

`json.loads` runs in C and holds the GIL for the whole parse: moving it to a worker thread does not help, and
10 MB of small values (`[[],[],...]`, token ids, chat messages) freezes the event loop for a second or more.
Here json's own pure-Python scanner walks the arrays and objects, which releases the GIL between values, and
an array's elements are read by `json.loads` in runs of at most RUN_CHARS characters (a run ends at a comma
where the next element begins; a run that does not parse as whole values is left to the scanner, element by
element, up to its end). The nesting depth is counted as the walk goes, and checked on each run before its
parse, so no bracket-counting pass over the whole body (a regex that would also hold the GIL) is needed first.
"""

from __future__ import annotations

import json
from json.decoder import WHITESPACE, JSONDecodeError, JSONObject
from json.scanner import py_make_scanner

from ..wire.json_depth import nests_deeper_than

RUN_CHARS = 1 << 16  # parsed by json.loads at once: a few milliseconds holding the GIL
# Where the next run may end, by the first character of the elements: after a closing bracket, or any comma.
_RUN_ENDS = {"{": "},", "[": "],"}


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
        # The scanner alone reads up to here: a run tried from before it did not parse. Runs are tried only
        # past it, so the text of failed runs never overlaps and their cost stays linear in the body.
        self.scan_from = 0
        self.parse_object, self.parse_array = self._nested(JSONObject), self._nested(self._array)
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

    def _array(self, s_and_end: tuple[str, int], scan_once) -> tuple[list, int]:
        """JSONArray's contract, with runs of elements parsed by json.loads between the scanner's elements."""
        s, end = s_and_end
        values: list = []
        end = _skip_space(s, end)
        if s[end : end + 1] == "]":
            return values, end + 1
        while True:
            if end >= self.scan_from:
                end = self._run(s, end, values)
            try:
                value, end = scan_once(s, end)
            except StopIteration as err:
                raise JSONDecodeError("Expecting value", s, err.value) from None
            values.append(value)
            end = _skip_space(s, end)
            if s[end : end + 1] == "]":
                return values, end + 1
            if s[end : end + 1] != ",":
                raise JSONDecodeError("Expecting ',' delimiter", s, end)
            end = _skip_space(s, end + 1)

    def _run(self, s: str, start: int, values: list) -> int:
        """Parse whole elements from `start` (the first character of one) up to a comma within RUN_CHARS in
        one json.loads; where the next element starts (`start` if the run did not parse)."""
        end_mark = _RUN_ENDS.get(s[start : start + 1], ",")
        comma = s.rfind(end_mark, start, start + RUN_CHARS) + len(end_mark) - 1
        if comma <= start:
            return start
        run = s[start:comma]
        try:
            if nests_deeper_than(run, self.max_depth - self.depth):  # the scanner finds the spot and raises
                raise ValueError("too deep")
            values.extend(json.loads(f"[{run}]"))  # parses only if the comma ends an element of this array
        except (ValueError, RecursionError):
            self.scan_from = comma
            return start
        return _skip_space(s, comma + 1)


def _skip_space(s: str, at: int) -> int:
    return WHITESPACE.match(s, at).end()
