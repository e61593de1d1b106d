"""Stop strings on streamed text: cut before the first one, hold back what could still become one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .stop_automaton import compile_stops


class StopResult(NamedTuple):
    """What one push made safe to show, and whether a stop string has ended the text."""

    text: str
    stopped: bool


class StopMatcher:
    """Cuts text before the earliest occurrence of any stop string and holds back, while streaming,
    exactly the longest tail that is still a prefix of some stop string.

    Terms:
    - text: the concatenation of everything pushed, up to the push that stops.
    - stop: the first push after which text contains a stop string ends the text, since generation
      ends there; a longer stop string that would have started earlier but is not complete yet
      never occurs.
    - cut text: text before the earliest start of any stop string in it; all of text if there is none.
    - held: the pushed text not yet emitted. While not stopped it is the longest suffix of text that
      is a proper prefix of some stop string (possibly ""); nothing else is ever held.
    Every emitted piece is final: the pieces so far are always a prefix of the cut text, and the
    pieces plus the last result's text (on a stop) or plus flush() (otherwise) equal it exactly.
    After a stop, push returns StopResult("", True) and flush returns "": the text has ended.

    The state is one node of a shared Aho–Corasick automaton (stop_automaton.py) plus the held text, so
    a request's memory and per-character time are linear in the stop strings' total length.
    """

    def __init__(self, stops: Sequence[str]):
        if isinstance(stops, str):
            raise ValueError(f"stops must be a sequence of strings, not the string {stops!r}")
        for stop in stops:
            if not isinstance(stop, str) or not stop:
                raise ValueError(f"a stop string must be a non-empty str, got {stop!r}")
        self._automaton = compile_stops(tuple(dict.fromkeys(stops)))
        self._node = 0  # the automaton's state after all text pushed: the held text's node
        self._held = ""
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def push(self, text: str) -> StopResult:
        """Add streamed text; returns the part of it (and of the held tail) that is now safe to show."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {text!r}")
        if self._stopped:
            return StopResult("", True)
        # A stop string completed by this text ends inside it; it may start inside the held text (the node
        # is the longest suffix that could still become a stop string, so no earlier start is possible).
        # Every stop ending in this push counts: the earliest start wins, as one push is one piece of text.
        automaton, node, earliest = self._automaton, self._node, None
        for j, ch in enumerate(text):
            node = automaton.step(node, ch)
            length = automaton.match[node]
            if length:
                start = len(self._held) + j + 1 - length
                earliest = start if earliest is None else min(earliest, start)
        region = self._held + text
        if earliest is not None:
            self._held, self._node, self._stopped = "", 0, True
            return StopResult(region[:earliest], True)
        keep = automaton.depth[node]
        self._node, self._held = node, region[len(region) - keep :] if keep else ""
        return StopResult(region[: len(region) - keep], False)

    def flush(self) -> str:
        """At the end of generation (no stop string): releases the held-back tail."""
        held, self._held, self._node = self._held, "", 0
        return held
