"""Stop strings on streamed text: cut before the first one, hold back what could still become one."""
from __future__ import annotations

from typing import NamedTuple, Sequence


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
    """

    def __init__(self, stops: Sequence[str]):
        if isinstance(stops, str):
            raise ValueError(f"stops must be a sequence of strings, not the string {stops!r}")
        for stop in stops:
            if not isinstance(stop, str) or not stop:
                raise ValueError(f"a stop string must be a non-empty str, got {stop!r}")
        self._stops = tuple(dict.fromkeys(stops))
        # Every proper prefix of a stop string, for the held-back tail.
        self._prefixes = frozenset(s[:k] for s in self._stops for k in range(1, len(s)))
        self._longest_prefix = max((len(s) - 1 for s in self._stops), default=0)
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
        # A stop string completed by this text starts inside held + text: one starting earlier would
        # make a longer suffix of the earlier text a proper prefix of it than the held one.
        region = self._held + text
        start = self._earliest_stop(region)
        if start is not None:
            self._held, self._stopped = "", True
            return StopResult(region[:start], True)
        keep = self._held_length(region)
        self._held = region[len(region) - keep:]
        return StopResult(region[:len(region) - keep], False)

    def flush(self) -> str:
        """At the end of generation (no stop string): releases the held-back tail."""
        held, self._held = self._held, ""
        return held

    def _earliest_stop(self, region: str) -> int | None:
        starts = [i for i in (region.find(s) for s in self._stops) if i >= 0]
        return min(starts) if starts else None

    def _held_length(self, region: str) -> int:
        # Longest first; a suffix longer than every stop string's proper prefixes cannot be held.
        for k in range(min(len(region), self._longest_prefix), 0, -1):
            if region[len(region) - k:] in self._prefixes:
                return k
        return 0
