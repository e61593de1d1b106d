"""How many tokens a request drafts at its next decode step. Each draft verified is a row of the step, and a row
costs a good part of what the step's first does (docs/benchmarks.md, "Speculative decoding"), so drafts the
target rejects make speculation slower than plain decoding. After a verification that accepted a of its drafts, the next
draft is at most a + 1 long, and twice as long after each verification that accepted all it drafted, up to k
(a lookup that was just accepted whole is most often inside a copied span, which ends suddenly, not
gradually: on a repeated paragraph, growing by one took five verifications to return to k after one break). A
verification that accepted none also pauses drafting for 1, then 2, 4, ... up to MAX_PAUSE decode steps, and
an accepted draft ends that run. The output is the same either way: drafts only decide how many tokens a step
may accept."""

from __future__ import annotations

MAX_PAUSE = 16  # decode steps without drafts, at most, after a run of rejected verifications


class DraftPacing:
    def __init__(self, k: int) -> None:
        self.k = k  # the most drafts a step
        self.length = k  # the most drafts the next step
        self.misses = 0  # verifications in a row that accepted no draft
        self.pause = 0  # decode steps left without drafts

    def next_length(self) -> int:
        """How many drafts to ask for at this decode step: 0 within a pause (a step of it counts down)."""
        if self.pause:
            self.pause -= 1
            return 0
        return self.length

    def record(self, num_drafted: int, num_accepted: int) -> None:
        """After a verification of num_drafted >= 1 drafts, num_accepted of them accepted."""
        if num_accepted == num_drafted:
            self.length = min(self.k, 2 * self.length)
        else:
            self.length = num_accepted + 1
        if num_accepted:
            self.misses = 0
        else:
            self.misses += 1
            self.pause = min(2 ** (self.misses - 1), MAX_PAUSE)
