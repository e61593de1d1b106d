"""Prompt lookup: draft the tokens that followed the latest earlier occurrence of the sequence's last n-gram.
No second model; strong when the output repeats its input (summaries, edits, code)."""

from __future__ import annotations

from collections.abc import Sequence


class NgramProposer:
    def __init__(self, max_ngram: int = 3, min_ngram: int = 2):
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def propose(self, ids: Sequence[int], k: int) -> list[int]:
        ids = list(ids)
        n_ids = len(ids)
        for n in range(min(self.max_ngram, n_ids - 1), self.min_ngram - 1, -1):
            suffix = ids[n_ids - n :]
            # the latest match that ends before the suffix itself, so something follows it
            for start in range(n_ids - n - 1, -1, -1):
                if ids[start : start + n] == suffix:
                    return ids[start + n : start + n + k]
        return []

    def rollback(self, num_tokens: int) -> None:
        """Stateless: nothing to forget."""
