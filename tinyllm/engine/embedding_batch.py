"""What the embedding queue's worker runs: a caller's `Job`, the `LongInput` it runs in chunks, and one forward's
`Batch` (engine/embedding_queue.py chooses them).

A batch is either inputs of one length side by side (no padding: padding changes a vector's last bits) or the next
chunk of the one long input in progress. Every row is pooled and normalized on its own, so a vector is the same bits
alone and beside other inputs; a long input always runs in the same chunks, so it too is the same bits however the
other jobs come and go.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..cache.kv_cache import KVCache
from ..model.pooling import Pooling, pool
from ..model.step import CacheStep


@dataclass(eq=False)
class Job:
    ids: list[list[int]]
    pooling: Pooling
    normalize: bool
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    pending: dict[int, deque[int]] = field(default_factory=dict)  # input length -> indices not yet taken
    num_running: int = 0  # inputs taken and not yet embedded (in the running batch, or the long input)
    vectors: list[torch.Tensor | None] = field(default_factory=list)
    is_cancelled: bool = False
    is_answered: bool = False  # counted out of the queue's unanswered jobs

    def __post_init__(self) -> None:
        for i, x in enumerate(self.ids):
            self.pending.setdefault(len(x), deque()).append(i)
        self.vectors = [None] * len(self.ids)

    @property
    def num_tokens(self) -> int:
        return sum(len(x) for x in self.ids)

    @property
    def num_pending_tokens(self) -> int:
        return sum(length * len(queue) for length, queue in self.pending.items())

    def take(self, length: int) -> int | None:
        """The index of one pending input of `length`, or None."""
        queue = self.pending.get(length)
        if not queue:
            return None
        i = queue.popleft()
        if not queue:
            del self.pending[length]
        self.num_running += 1
        return i

    def vector(self, pooled: torch.Tensor) -> torch.Tensor:
        """A pooled row [1, C] -> this job's vector [C]."""
        return (F.normalize(pooled, dim=-1) if self.normalize else pooled)[0]

    def settle(self, outcome: torch.Tensor | BaseException) -> None:
        """Resolve the caller's future from the worker thread (a vector stack [N, C], or an exception)."""

        def resolve() -> None:
            if self.future.done():
                return
            if isinstance(outcome, BaseException):
                self.future.set_exception(outcome)
            else:
                self.future.set_result(outcome)

        with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody waits
            self.loop.call_soon_threadsafe(resolve)


@dataclass(eq=False)
class LongInput:
    """An input longer than a batch's tokens, run chunk by chunk over a KV cache of its own length, so that no
    forward holds the worker longer than a batch does. `pooled`: the sum of its states so far (mean) or the last
    state (last), [1, C]."""

    job: Job
    index: int
    cache: KVCache
    num_done: int = 0  # positions run
    pooled: torch.Tensor | None = None

    @classmethod
    def start(cls, model, job: Job, index: int) -> LongInput:
        c = model.config
        cache = KVCache(c.num_layers, c.num_kv_heads, c.head_dim, len(job.ids[index]), device=model.device)
        return cls(job, index, cache)

    @property
    def length(self) -> int:
        return len(self.job.ids[self.index])


@dataclass(frozen=True)
class Batch:
    rows: list[tuple[Job, int]]  # (job, input index) per row
    length: int  # tokens per row
    long: LongInput | None = None  # set: this batch is the long input's next chunk, `length` tokens of it

    @property
    def num_tokens(self) -> int:
        return len(self.rows) * self.length


@torch.inference_mode()
def run_batch(model, batch: Batch) -> list[torch.Tensor]:
    """One forward -> the vector [C] of each row the batch completes (none for a long input's earlier chunks)."""
    if batch.long is not None:
        return _run_chunk(model, batch)
    ids = torch.tensor([job.ids[i] for job, i in batch.rows], dtype=torch.long)  # [B, T]
    states = model.model.norm(model.hidden_states(ids.to(model.device))).float().cpu()  # [B, T, C]
    length = torch.tensor([batch.length])  # [1]
    return [job.vector(pool(states[r : r + 1], length, job.pooling)) for r, (job, _) in enumerate(batch.rows)]


def _run_chunk(model, batch: Batch) -> list[torch.Tensor]:
    long, job = batch.long, batch.long.job
    start, end = long.num_done, long.num_done + batch.length
    ids = torch.tensor([job.ids[long.index][start:end]], dtype=torch.long)  # [1, T]
    step = CacheStep(long.cache, batch.length)
    states = model.model.norm(model.hidden_states(ids.to(model.device), step)).float().cpu()  # [1, T, C]
    if job.pooling is Pooling.LAST:
        long.pooled = states[:, -1]  # [1, C]
    else:
        part = states.sum(dim=1)  # [1, C]
        long.pooled = part if long.pooled is None else long.pooled + part
    long.num_done = end
    if end < long.length:
        return []
    pooled = long.pooled if job.pooling is Pooling.LAST else long.pooled / long.length  # [1, C]
    return [job.vector(pooled)]
