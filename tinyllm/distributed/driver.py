"""TensorParallel: the driver's side of a tensor-parallel group (rank 0 of N).

The driver holds shard 0 of the model and runs the engine as usual: the scheduler, the KV bookkeeping and
sampling happen here once. Its runner broadcasts each step's plan, then runs its own shard's forward; the
all-reduces inside it line up with the workers'. Sampling reads the full logits (the head is replicated), so
the (seed, position) random stream is the same as with one rank.

Failure: any error during a step (a worker gone: at once, from the closed connection; a worker hung: after
timeout_s, from the collective's timeout) fails that step with EngineDown, stops every local worker
(SIGKILL after JOIN_S) and leaves the group; every later step raises EngineDown at once.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import itertools
import logging
import re

import torch

from ..cache.paged_cache import PagedStorage
from ..engine.runner import ModelRunner, StepInputs, execute
from ..errors import EngineDown, TinyLLMError
from ..speculative.factory import DraftModels
from . import group as groups
from .config import ParallelConfig
from .launcher import JOIN_S, describe_exits, start_workers, stop_workers, threads_per_rank
from .plan import DropStorage, NewStorage, Shutdown, Step, send
from .shard import check_shardable, local_kv_heads, shard_model
from .worker import ModelSource

log = logging.getLogger("tinyllm.distributed")


class TensorParallel:
    def __init__(self, config: ParallelConfig, model, source: ModelSource):
        """Start the local workers, join the group as rank 0 and shard `model` in place. Raises TinyLLMError
        (and leaves no process behind) if the model does not split or a rank fails to start."""
        n = config.tensor_parallel_size
        check_shardable(model.config, n)
        if torch.distributed.is_initialized():
            raise TinyLLMError("this process already runs a tensor-parallel group; close that LLM first")
        if config.master_port is None:
            config = dataclasses.replace(config, master_port=groups.free_port(config.master_addr))
        self.config, self.model, self.error = config, model, None
        self.num_local_kv_heads = local_kv_heads(model.config.num_kv_heads, n)
        self._keys, self._drops = itertools.count(), []
        self._threads_before = torch.get_num_threads()
        self.processes = start_workers(config, source)
        try:
            threads = threads_per_rank(config) if source.device == "cpu" else None
            if threads:
                torch.set_num_threads(threads)
            self.comm = groups.join(
                0, n, config.master_addr, config.master_port, source.device, config.timeout_s, config.startup_timeout_s
            )
            shard_model(model, 0, n, self.comm.all_reduce)
            torch.distributed.barrier(group=self.comm.startup)
        except BaseException as exc:
            exits = describe_exits(self.processes)
            self._tear_down(0.0)
            if isinstance(exc, TinyLLMError):
                raise
            raise TinyLLMError(
                f"the tensor-parallel group of {n} ranks failed to start ({exits or type(exc).__name__}: {exc})"
            ) from None
        atexit.register(self.close)

    @property
    def stats(self) -> groups.AllReduceStats:
        return self.comm.stats

    def runner(self, model, storage: PagedStorage) -> ParallelRunner:
        """A runner for one engine's KV pool; every worker makes a pool of the same shape."""
        key = next(self._keys)
        self.broadcast(
            [
                NewStorage(
                    key,
                    storage.n_layers,
                    storage.n_kv_heads,
                    storage.d_head,
                    storage.num_blocks,
                    storage.block_size,
                    storage.dtype,
                )
            ]
        )
        return ParallelRunner(model, storage, self, key)

    def drafts(self, tokenizer) -> DraftModels:
        return ParallelDrafts(self.model, tokenizer)

    def forget(self, key: int) -> None:
        """An engine's pool is gone: the workers drop theirs with the next broadcast (not from here, which
        may run inside the garbage collector, between two collectives)."""
        self._drops.append(key)

    def broadcast(self, messages: list) -> None:
        self.check_alive()
        drops, self._drops = [DropStorage(k) for k in self._drops], []
        self.guarded(lambda: send(drops + messages, self.comm.control, self.config.timeout_s))

    def guarded(self, action):
        """Run a collective action; any failure brings the whole group down with EngineDown."""
        self.check_alive()
        try:
            return action()
        except BaseException as exc:
            self.fail(exc)

    def check_alive(self) -> None:
        if self.error is not None:
            raise EngineDown(self.error)

    def fail(self, exc: BaseException):
        exits = describe_exits(self.processes)  # before we stop the rest
        self._tear_down(0.0)
        silent = f"a rank did not answer within {self.config.timeout_s:g} s"
        self.error = f"the tensor-parallel group is down: {exits or silent} ({cause(exc)})"
        log.error(self.error)
        if isinstance(exc, KeyboardInterrupt):
            raise exc
        raise EngineDown(self.error) from exc

    def close(self) -> None:
        """Stop the workers and leave the group (idempotent)."""
        atexit.unregister(self.close)
        if self.error is None:
            self.error = "the tensor-parallel group was closed"
            with contextlib.suppress(Exception):  # a rank already gone: it is stopped below anyway
                send([Shutdown()], self.comm.control, self.config.timeout_s)
            self._tear_down(JOIN_S)

    def _tear_down(self, grace_s: float) -> None:
        stop_workers(self.processes, grace_s)
        groups.leave()
        torch.set_num_threads(self._threads_before)


def cause(exc: BaseException) -> str:
    """The first sentence of an error, without gloo's source location: 'RuntimeError: Read error ...'."""
    text = str(exc).split("\n")[0]
    text = re.sub(r"^\[[^\]]*\] ", "", text).split(". ")[0]
    return f"{type(exc).__name__}: {text or 'no message'}"


class ParallelRunner(ModelRunner):
    """The driver's runner: broadcast the step's plan, then run shard 0's forward."""

    def __init__(self, model, storage: PagedStorage, tp: TensorParallel, key: int):
        super().__init__(model, storage)
        self.tp, self.key = tp, key

    def forward(self, inputs: StepInputs, rows: torch.Tensor) -> torch.Tensor:
        self.tp.broadcast([Step(self.key, inputs)])
        return self.tp.guarded(lambda: execute(self.model, self.storage, inputs, rows))

    def __del__(self) -> None:
        self.tp.forget(self.key)


class ParallelDrafts(DraftModels):
    """Draft models under tensor parallelism: a separate draft model runs on the driver alone; the target's
    own first layers cannot (they are sharded, and their all-reduces need every rank)."""

    def get(self, config):
        if config.draft_layers is not None:
            raise TinyLLMError(
                f"draft_layers={config.draft_layers} drafts with the target's sharded layers, which a "
                "tensor-parallel group cannot run on the driver alone; use a draft_model or ngram"
            )
        return super().get(config)
