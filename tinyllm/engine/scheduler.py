"""Scheduler: decides which requests run in the next step and how many tokens each computes.

Each step is one forward over a token budget (`max_num_batched_tokens`): first one decode token for every
running request, then prefill chunks (running requests mid-prefill first, then newly admitted ones), so a
long prompt never stalls the running streams (chunked prefill, as in Sarathi-Serve). Chunks end on block
boundaries unless they reach the end of the sequence, so the same positions are computed in the same
groups whether a prefix came from the cache or not. While other requests wait, partial prefills (chunks
that leave part of a prompt for later) take at most `long_prefill_token_threshold` tokens of a step between
them, and a long prompt that gets none of them lets shorter ones behind it in, so a short prompt arriving
during a long prefill is admitted in the very next step instead of after the whole long prefill. When blocks
run out, the most recently admitted request is preempted: its blocks are freed and it waits to be recomputed.
A constrained request whose next token masks are still being computed (on a grammar thread) sits out the
steps that would sample it, so a slow grammar delays no one else. The scheduler touches no tensors.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .kv_manager import KVManager
from .request import Request, RequestStatus


@dataclass
class ScheduledChunk:
    request: Request
    start: int  # first position computed (== request.num_computed)
    num_tokens: int  # positions [start, start + num_tokens)

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the end of the known sequence, so its logits are sampled."""
        return self.start + self.num_tokens == self.request.num_tokens

    @property
    def sample_start(self) -> int:
        """First position whose logits are sampled: the last committed token (then one per draft)."""
        return self.request.num_committed - 1


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    block_copies: list[tuple[int, int]] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)


def default_long_prefill_threshold(max_num_batched_tokens: int, block_size: int) -> int:
    """Half the step's budget (whole blocks, at least one): a long prompt keeps half its speed while others
    wait, and the other half (128 tokens at the default budget) admits their prompts and runs the decodes."""
    return max(block_size, max_num_batched_tokens // 2 // block_size * block_size)


class Scheduler:
    def __init__(
        self,
        kv: KVManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        long_prefill_token_threshold: int | None = None,
    ):
        self.kv, self.max_num_seqs, self.max_num_batched_tokens = kv, max_num_seqs, max_num_batched_tokens
        threshold = long_prefill_token_threshold
        if threshold is None:
            threshold = default_long_prefill_threshold(max_num_batched_tokens, kv.block_size)
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < kv.block_size:
            raise ValueError(
                f"long_prefill_token_threshold must be an integer >= the block size "
                f"({kv.block_size}), got {threshold!r}"
            )
        self.long_prefill_token_threshold = threshold
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in admission order: the last is preempted first

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def finish(self, req: Request, status: RequestStatus) -> None:
        """Retire a request at once: out of the queues, its blocks back to the pool."""
        req.status = status
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.kv.free(req)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = _StepBudget(self.max_num_batched_tokens, self.long_prefill_token_threshold)
        for req in sorted(self.running, key=lambda r: r.num_tokens - r.num_computed > 1):  # decodes first
            if req.status is not RequestStatus.RUNNING:  # preempted while scheduling an earlier one
                continue
            n = self._chunk_len(req, budget, contended=bool(self.waiting))
            if n == 0 or (n == req.num_tokens - req.num_computed and not can_sample(req)):
                continue
            if not self._allocate_or_preempt(req, n, out):
                continue
            out.chunks.append(ScheduledChunk(req, req.num_computed, n))
            budget.take(n, partial=n < req.num_tokens - req.num_computed)
        self._admit(out, budget)
        return out

    def _chunk_len(self, req: Request, budget: _StepBudget, contended: bool) -> int:
        """Tokens of req to compute this step; `contended`: other requests wait for admission, so a chunk
        that leaves part of the prompt for later (a partial prefill) must fit the partial allowance."""
        remaining = req.num_tokens - req.num_computed
        if remaining <= budget.tokens:
            return remaining  # the prompt's last chunk (or a decode): not partial
        limit = min(budget.tokens, budget.partial) if contended else budget.tokens
        P = self.kv.block_size
        if self.max_num_batched_tokens < P:
            return limit  # a whole budget under one block could never end on a boundary
        end = (req.num_computed + limit) // P * P  # end the chunk on a block boundary
        return max(0, end - req.num_computed)

    def _allocate_or_preempt(self, req: Request, n: int, out: SchedulerOutput) -> bool:
        while True:
            copies = self.kv.allocate(req, n)
            if copies is not None:
                out.block_copies += copies
                return True
            victim = self.running[-1]
            self._preempt(victim, out)
            if victim is req:
                return False

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        self.running.remove(req)
        self.kv.free(req)
        req.status, req.num_computed = RequestStatus.WAITING, 0
        req.num_preemptions += 1
        self.waiting.appendleft(req)
        out.preempted.append(req)
        out.chunks = [c for c in out.chunks if c.request is not req]

    def _admit(self, out: SchedulerOutput, budget: _StepBudget) -> None:
        deferred: list[Request] = []  # long prompts left for a later step, so shorter ones behind them start now
        while self.waiting and budget.tokens > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            if req in out.preempted:
                break  # not in the step that preempted it
            if not can_sample(req):  # its first masks are not ready: it keeps its place for a later step
                deferred.append(self.waiting.popleft())
                continue
            cached = self.kv.match_prefix(req)
            req.num_computed = cached
            n = self._chunk_len(req, budget, contended=len(self.waiting) + len(deferred) > 1)
            copies = self.kv.allocate(req, n) if n else None
            if copies is None:
                self.kv.free(req)
                req.num_computed = 0
                if n == 0 and budget.partial < budget.tokens:  # held back by the partial allowance only
                    deferred.append(self.waiting.popleft())
                    continue
                break
            if req.num_preemptions == 0:
                req.num_cached_tokens = cached
            self.waiting.popleft()
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            out.block_copies += copies
            out.chunks.append(ScheduledChunk(req, req.num_computed, n))
            budget.take(n, partial=n < req.num_tokens - req.num_computed)
        self.waiting.extendleft(reversed(deferred))  # they keep their places at the head of the queue


def can_sample(req: Request) -> bool:
    """Whether a step may sample req: it has no grammar, or its grammar's next masks are ready."""
    return req.constraint is None or req.constraint.is_ready()


@dataclass
class _StepBudget:
    """Tokens left in this step, and how many of them partial prefills may still take."""

    tokens: int
    partial: int

    def take(self, n: int, partial: bool) -> None:
        self.tokens -= n
        self.partial = max(0, self.partial - n) if partial else self.partial
