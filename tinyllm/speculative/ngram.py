"""Prompt lookup: draft the tokens that followed the latest earlier occurrence of the sequence's last n-gram.
No second model; strong when the output repeats its input (summaries, edits, code).

Each n-gram's latest start is kept in an index that grows with the sequence, so a step costs the new tokens'
n-grams and one lookup per n, not a scan of the whole sequence (in Python, a measurable share of a small
model's decode step once the sequence is a few hundred tokens long)."""

from __future__ import annotations

from collections.abc import Sequence


class NgramProposer:
    def __init__(self, max_ngram: int = 3, min_ngram: int = 2):
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.ids: list[int] = []  # the sequence indexed so far
        self.latest: dict[int, dict[tuple[int, ...], int]] = {}  # n -> n-gram -> its latest start with a follower

    def propose(self, ids: Sequence[int], k: int) -> list[int]:
        """The tokens after the latest earlier occurrence of the longest suffix n-gram (max_ngram down to
        min_ngram) that occurs earlier with something after it: up to k of them."""
        ids = list(ids)
        self._index(ids)
        for n in range(min(self.max_ngram, len(ids) - 1), self.min_ngram - 1, -1):
            start = self.latest[n].get(tuple(ids[len(ids) - n :]))
            if start is not None:
                return ids[start + n : start + n + k]
        return []

    def _index(self, ids: list[int]) -> None:
        """Index every n-gram of ids followed by at least one token (start + n <= len - 1), latest start kept."""
        done = len(self.ids)
        if ids[:done] != self.ids:  # not a continuation of what is indexed: start over
            done, self.latest = 0, {}
        for n in range(self.min_ngram, self.max_ngram + 1):
            grams = self.latest.setdefault(n, {})
            for start in range(max(0, done - n), len(ids) - n):  # starts that gained a follower
                grams[tuple(ids[start : start + n])] = start
        self.ids = ids

    def rollback(self, num_tokens: int) -> None:
        """Drafts never enter the index (it holds the sequence passed to propose): nothing to forget."""
