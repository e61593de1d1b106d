"""EmbeddingQueue: one thread that owns the model's forward for embeddings, fed by many callers on an event loop.

Terms. A *job* is one caller's inputs (token id lists) with its pooling; it waits on an asyncio future, holding no
thread. A *batch* is one forward (embedding_batch.py): inputs of one length, taken from the jobs in turn, one input
per job per turn, until `batch_tokens` tokens are taken; or the next `batch_tokens` of the one *long input* (longer
than `batch_tokens`) in progress, run in chunks over a KV cache of its own. Each batch starts at the next job, so a
one-token job waits for at most one batch per job ahead of it, never for a whole large job or a whole long input.

    jobs, in turn:   A [3, 3, 3, 9]   B [3]   C [9, 9]        (input lengths; batch_tokens 12)
    batch 1 (A's):   length 3 -> A0 B0 A1 A2   (A, B, A, A: in turn until 12 tokens or none of length 3 is left)
    batch 2 (C's):   length 9 -> C0            (B is done; 9 tokens leave no room for a second input of 9)
    batch 3 (A's):   length 9 -> A3            (then C1)

Inputs of one length need no padding: padding changes a vector's last bits, and an input must give the same bits
alone as beside others' inputs. Each row is pooled and normalized on its own for the same reason. One long input
runs at a time (its cache holds its whole length); a job whose turn comes with only long inputs while another's
runs passes its turn.

Admission is bounded: a job is refused (`QueueFull`, with a hint of when to retry) while `max_queued_requests`
jobs are unanswered or its tokens would take the tokens not yet embedded past `max_queued_tokens`. A cancelled job
(its caller left) drops its inputs not yet run, its long input's remaining chunks included; the worker never runs
them. `close()` refuses new jobs,
lets the running batch finish, fails the queued jobs with `QueueClosed` and joins the thread.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..model.pooling import Pooling
from .embedding_batch import Batch, Job, LongInput, run_batch

log = logging.getLogger("tinyllm.embeddings")


@dataclass(frozen=True)
class EmbeddingLimits:
    """What one request may cost and how much work may wait (docs/server.md, Embeddings, has the figures)."""

    max_request_tokens: int = 8192  # tokens of one request's inputs together
    max_queued_requests: int = 64  # requests admitted and not yet answered
    max_queued_tokens: int = 65536  # their tokens not yet embedded
    batch_tokens: int = 64  # tokens per forward (a longer input runs in chunks of this many)

    def __post_init__(self) -> None:
        for name in ("max_request_tokens", "max_queued_requests", "max_queued_tokens", "batch_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.max_queued_tokens < self.max_request_tokens:
            raise ValueError(
                f"max_queued_tokens must be at least max_request_tokens ({self.max_request_tokens}), "
                f"got {self.max_queued_tokens}"
            )


class QueueFull(Exception):
    """The queue holds as much work as it may; `retry_after_s` is a guess of when it will have room."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class QueueClosed(Exception):
    """The queue is closing: no new job is taken and the queued ones are not run."""


@dataclass(frozen=True)
class QueueCounts:
    num_embedded: int  # inputs run through a forward
    num_skipped: int  # inputs dropped because their job was cancelled
    num_forwards: int
    num_queued_requests: int
    num_queued_tokens: int


class EmbeddingQueue:
    """See the module's docstring. `model` has `hidden_states(ids)` and `model.norm` (model/llama.py)."""

    def __init__(self, model, limits: EmbeddingLimits | None = None):
        self.model, self.limits = model, limits or EmbeddingLimits()
        self._cond = threading.Condition()
        self._jobs: deque[Job] = deque()  # jobs with pending inputs, in turn order
        self._num_unanswered = 0
        self._num_tokens_left = 0  # admitted, neither embedded nor skipped
        self._num_embedded = self._num_skipped = self._num_forwards = 0
        self._tokens_per_s: float | None = None
        self._long: LongInput | None = None  # the one input longer than a batch in progress (it runs in chunks)
        self._running: Batch | None = None  # the batch in the worker's forward
        self._is_closing = False
        self._thread = threading.Thread(target=self._run, name="tinyllm-embeddings", daemon=True)

    def start(self) -> EmbeddingQueue:
        self._thread.start()
        return self

    @property
    def is_closed(self) -> bool:
        return self._is_closing

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive()

    # ---- the caller's side (the event loop's thread)

    def submit(self, ids: Sequence[Sequence[int]], pooling: Pooling, normalize: bool) -> Job:
        """A job for `ids` (each non-empty, at most max_request_tokens together); await `job.future` for its
        float32 [N, C] vectors. Raises QueueFull or QueueClosed."""
        loop = asyncio.get_running_loop()
        job = Job([list(x) for x in ids], pooling, normalize, loop.create_future(), loop)
        assert job.ids and all(job.ids) and job.num_tokens <= self.limits.max_request_tokens
        with self._cond:
            if self._is_closing:
                raise QueueClosed("the embedding queue is closed")
            self._check_room(job.num_tokens)
            self._jobs.append(job)
            self._num_unanswered += 1
            self._num_tokens_left += job.num_tokens
            self._cond.notify()
        return job

    def cancel(self, job: Job) -> None:
        """Drop the job's inputs not yet run (its caller has gone); safe to call at any time."""
        with self._cond:
            if job.is_answered or job.is_cancelled:
                return
            job.is_cancelled = True
            self._num_skipped += self._drop_pending(job)
            long = self._long
            if long is not None and long.job is job and (self._running is None or self._running.long is not long):
                self._drop_long()  # (a running chunk's input is dropped when the chunk ends)
            if job in self._jobs and not (self._long is not None and self._long.job is job):
                self._jobs.remove(job)
            self._answer_if_done(job)
        if not job.future.done():
            job.future.cancel()

    def counts(self) -> QueueCounts:
        with self._cond:
            return QueueCounts(
                self._num_embedded, self._num_skipped, self._num_forwards, self._num_unanswered, self._num_tokens_left
            )

    def close(self, timeout: float | None = None) -> None:
        """Refuse new jobs, let the running batch finish, fail the queued jobs with QueueClosed, join the thread."""
        with self._cond:
            self._is_closing = True
            self._cond.notify_all()
        if self._thread.ident is None:  # never started: nothing runs, the queued jobs fail here
            self._fail_queued()
        elif self._thread.is_alive():
            self._thread.join(timeout)

    def _check_room(self, num_tokens: int) -> None:
        lim = self.limits
        if self._num_unanswered >= lim.max_queued_requests:
            why = f"{self._num_unanswered} embedding requests are waiting, the limit of {lim.max_queued_requests}"
        elif self._num_tokens_left + num_tokens > lim.max_queued_tokens:
            why = (
                f"{self._num_tokens_left} tokens are waiting to be embedded and this request's {num_tokens} "
                f"would pass the limit of {lim.max_queued_tokens}"
            )
        else:
            return
        raise QueueFull(f"the embedding queue is full: {why}; retry later", self._retry_after_s())

    def _retry_after_s(self) -> int:
        # The waiting tokens at the rate the worker has been embedding: a hint, not a promise.
        rate = self._tokens_per_s or 1000.0
        return max(1, min(60, math.ceil(self._num_tokens_left / rate)))

    # ---- the worker's side

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                break
            start = time.perf_counter()
            try:
                vectors = run_batch(self.model, batch)
            except Exception as exc:  # the model's fault, not one caller's: fail this batch's jobs, keep serving
                log.exception("an embedding forward failed")
                self._fail(batch, exc)
                continue
            self._finish(batch, vectors, time.perf_counter() - start)
        self._fail_queued()

    def _next_batch(self) -> Batch | None:
        with self._cond:
            while not self._jobs and not self._is_closing:
                self._cond.wait()
            if self._is_closing:
                return None
            batch = None
            for _ in range(len(self._jobs)):  # the long input's owner, at the latest, has a batch
                batch = self._batch_from(self._jobs[0])
                self._jobs.rotate(-1)  # the next batch starts at the next job
                if batch is not None:
                    break
            assert batch is not None, "the long input's job has left the turns"
            self._prune()
            self._running = batch
            return batch

    def _batch_from(self, head: Job) -> Batch | None:
        """The head job's turn (under the lock): the next chunk of its long input, or inputs of its first length,
        in turn from every job; None when it has only long inputs and another job's long input is running."""
        budget, long = self.limits.batch_tokens, self._long
        if long is not None and long.job is head:
            return Batch([(head, long.index)], min(budget, long.length - long.num_done), long)
        length = next((n for n in head.pending if n <= budget or long is None), None)
        if length is None:
            return None
        if length > budget:
            self._long = LongInput.start(self.model, head, head.take(length))
            return Batch([(head, self._long.index)], budget, self._long)
        rows: list[tuple[Job, int]] = []
        size = budget // length
        while len(rows) < size:  # one input per job per turn
            num_before = len(rows)
            for job in self._jobs:
                i = job.take(length) if len(rows) < size else None
                if i is not None:
                    rows.append((job, i))
            if len(rows) == num_before:
                break
        return Batch(rows, length)

    def _prune(self) -> None:
        """Jobs with nothing left to take leave the turns (under the lock)."""
        owner = self._long.job if self._long is not None else None
        for job in [j for j in self._jobs if not j.pending and j is not owner]:
            self._jobs.remove(job)

    def _finish(self, batch: Batch, vectors: list[torch.Tensor], seconds: float) -> None:
        done = []
        with self._cond:
            self._running = None
            self._num_forwards += 1
            self._num_tokens_left -= batch.num_tokens
            rate = batch.num_tokens / max(seconds, 1e-6)
            self._tokens_per_s = rate if self._tokens_per_s is None else 0.8 * self._tokens_per_s + 0.2 * rate
            if batch.long is not None and not vectors:  # an earlier chunk: the input goes on, unless its job left
                if batch.long.job.is_cancelled:
                    self._drop_long()
                return
            if batch.long is not None:
                self._long = None
                self._prune()
            self._num_embedded += len(vectors)
            for (job, i), vector in zip(batch.rows, vectors, strict=True):
                job.vectors[i] = vector
                job.num_running -= 1
                if self._answer_if_done(job) and not job.is_cancelled:
                    done.append(job)
        for job in done:
            job.settle(torch.stack(job.vectors))  # [N, C]

    def _drop_long(self) -> None:
        """Drop the long input of a cancelled job, once no forward runs it (under the lock)."""
        long, self._long = self._long, None
        self._num_skipped += 1
        self._num_tokens_left -= long.length - long.num_done
        long.job.num_running -= 1
        if long.job in self._jobs and not long.job.pending:
            self._jobs.remove(long.job)
        self._answer_if_done(long.job)

    def _fail(self, batch: Batch, exc: Exception) -> None:
        jobs = list(dict.fromkeys(job for job, _ in batch.rows))
        with self._cond:
            self._running = None
            self._num_tokens_left -= batch.num_tokens
            if batch.long is not None:
                self._num_tokens_left -= batch.long.length - batch.long.num_done - batch.length
                self._long = None
            for job in jobs:
                job.num_running = 0
                self._drop_pending(job)
                if job in self._jobs:
                    self._jobs.remove(job)
                self._answer_if_done(job)
        for job in jobs:
            job.settle(RuntimeError(f"the embedding forward failed ({type(exc).__name__})"))

    def _drop_pending(self, job: Job) -> int:
        """Drop the job's pending inputs (under the lock); their count."""
        num = sum(len(queue) for queue in job.pending.values())
        self._num_tokens_left -= job.num_pending_tokens
        job.pending.clear()
        return num

    def _answer_if_done(self, job: Job) -> bool:
        """Count the job out once nothing of it is pending or running (under the lock); True the first time."""
        if job.is_answered or job.num_running or job.pending:
            return False
        job.is_answered = True
        self._num_unanswered -= 1
        return True

    def _fail_queued(self) -> None:
        with self._cond:
            if self._long is not None:
                self._num_tokens_left -= self._long.length - self._long.num_done
                self._long.job.num_running -= 1
                self._long = None
            jobs = list(self._jobs)
            self._jobs.clear()
            for job in jobs:
                self._drop_pending(job)
                self._answer_if_done(job)
        for job in jobs:
            job.settle(QueueClosed("the embedding queue closed before this job ran"))
