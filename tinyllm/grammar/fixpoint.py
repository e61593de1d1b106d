"""Horn rules and their least fixpoint: which symbols can finish (produce something finite).

A symbol finishes when every part of one of its rules finishes; a rule with no parts finishes at once, a symbol
with no rule never. `finishing()` solves this by forward chaining (each rule counts its parts not yet known to
finish; a symbol that finishes wakes the rules waiting on it), in time linear in the rules, without recursion.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

NEVER = ("never",)  # a symbol with no rule: a part that can never be made


@dataclass
class Chain:
    """Why a symbol does not finish: `steps` (symbol, label of the part it waits on) from the start, ending at
    `end`: the symbol the chain comes back to (`is_cycle`), or one with no rule at all."""

    steps: list[tuple[Hashable, str | None]]
    end: Hashable
    is_cycle: bool


@dataclass
class Rules:
    """Horn rules `head <- parts`; each part carries a label that says, in an error, why it is needed (None:
    a step of the structure that needs no words)."""

    rules: list[tuple[Hashable, tuple[tuple[Hashable, str | None], ...]]] = field(default_factory=list)

    def add(self, head: Hashable, parts: Sequence[tuple[Hashable, str | None]] = ()) -> None:
        self.rules.append((head, tuple(parts)))

    def finishing(self) -> set:
        """Every head that some rule lets finish."""
        waiting = [len({s for s, _ in parts}) for _, parts in self.rules]
        watchers: dict[Hashable, list[int]] = defaultdict(list)
        for i, (_, parts) in enumerate(self.rules):
            for symbol in {s for s, _ in parts}:
                watchers[symbol].append(i)
        done: set = set()
        queue = [head for (head, _), n in zip(self.rules, waiting) if n == 0]
        while queue:
            symbol = queue.pop()
            if symbol in done:
                continue
            done.add(symbol)
            for i in watchers[symbol]:
                waiting[i] -= 1
                if waiting[i] == 0:
                    queue.append(self.rules[i][0])
        return done

    def blame(self, start: Hashable, done: set) -> Chain:
        """From `start` (which does not finish), the chain of parts that do not finish either: at each symbol, the
        first such part of its first rule."""
        first_rule: dict = {}
        for head, parts in self.rules:
            first_rule.setdefault(head, parts)
        steps, seen, symbol = [], set(), start
        while symbol not in seen:
            seen.add(symbol)
            stuck = [(s, label) for s, label in first_rule.get(symbol, ()) if s not in done]
            if not stuck:
                return Chain(steps, symbol, is_cycle=False)
            steps.append((symbol, stuck[0][1]))
            symbol = stuck[0][0]
        return Chain(steps, symbol, is_cycle=True)
