"""StopAutomaton: an Aho–Corasick automaton over a set of stop strings, shared by every matcher that uses them.

Terms:
- node: a distinct prefix of some stop string (node 0 is the empty prefix); `depth` is its length.
- goto: the trie edge from a node on one character; `fail` leads to the node of the longest proper suffix
  of a node's string that is also a node (the classic failure link).
- match: the length of the longest stop string that ends at a node (its own string or one of its suffixes),
  0 if none.
After reading any text from node 0, the state is the node of the longest suffix of the text that is a prefix
of some stop string. Nodes number at most the stop strings' total length plus one, and each character read
costs O(1) amortised, so memory and time are linear in the stop strings' total length, never quadratic.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

_CODE_BITS = 21  # every code point is below 2**21, so (node << 21) | ord(ch) names one edge


class StopAutomaton:
    def __init__(self, stops: tuple[str, ...]):
        self.stops = stops
        self._goto: dict[int, int] = {}
        self.depth: list[int] = [0]
        self.match: list[int] = [0]
        for stop in stops:
            self._insert(stop)
        self.fail: list[int] = [0] * len(self.depth)
        self._link()

    @property
    def num_nodes(self) -> int:
        return len(self.depth)

    def _insert(self, stop: str) -> None:
        node = 0
        for ch in stop:
            key = (node << _CODE_BITS) | ord(ch)
            nxt = self._goto.get(key)
            if nxt is None:
                nxt = self._goto[key] = len(self.depth)
                self.depth.append(self.depth[node] + 1)
                self.match.append(0)
            node = nxt
        self.match[node] = len(stop)

    def _link(self) -> None:
        """Failure links breadth first, so a node's suffixes are linked before it; match inherits."""
        children: list[list[tuple[str, int]]] = [[] for _ in self.depth]
        for key, child in self._goto.items():
            children[key >> _CODE_BITS].append((chr(key & ((1 << _CODE_BITS) - 1)), child))
        queue = deque(child for _, child in children[0])
        while queue:
            node = queue.popleft()
            for ch, child in children[node]:
                self.fail[child] = self._next(self.fail[node], ch) if node else 0
                if not self.match[child]:
                    self.match[child] = self.match[self.fail[child]]
                queue.append(child)

    def _next(self, node: int, ch: str) -> int:
        code = ord(ch)
        while True:
            nxt = self._goto.get((node << _CODE_BITS) | code)
            if nxt is not None:
                return nxt
            if node == 0:
                return 0
            node = self.fail[node]

    def step(self, node: int, ch: str) -> int:
        """The state after reading ch in state node."""
        return self._next(node, ch)


@lru_cache(maxsize=32)
def compile_stops(stops: tuple[str, ...]) -> StopAutomaton:
    """The automaton for these stop strings, built once and shared: the n choices of one request (and
    repeated requests) reuse it, and a server can build it before the request reaches the engine."""
    return StopAutomaton(stops)
