"""TensorParallel: the driver's side of a tensor-parallel group (rank 0 of N).

The driver holds shard 0 of the model and runs the engine as usual: the scheduler, the KV bookkeeping and
sampling happen here once. Its runner broadcasts each step's plan, then runs its own shard's forward; the
all-reduces inside it line up with the workers'. Sampling reads the full logits (the head is replicated), so
the (seed, position) random stream is the same as with one rank.

Start-up: the driver serves the rendezvous store, starts its local ranks (launcher.py) and waits on the store
until every rank has loaded its model, watching them (watch.py): a local worker that exits, a rank that leaves a
note or whose heartbeat stops fails the start at once, naming the rank, its exit status and its last output.

Failure: any error during a step (a worker gone: at once, from the closed connection; a worker hung: after
timeout_s, from the collective's timeout) fails that step with EngineDown naming the ranks that stopped, stops
every local worker (SIGKILL after JOIN_S), leaves the group and closes the store (which ends the workers of
other machines); every later step raises EngineDown at once.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import gc
import itertools
import logging
import shutil
import tempfile

import torch

from ..cache.paged_cache import PagedStorage
from ..engine.runner import ModelRunner, StepInputs, execute
from ..errors import EngineDown, TinyLLMError
from ..speculative.factory import DraftModels
from . import group as groups
from .config import ParallelConfig
from .launcher import JOIN_S, drop_model_file, start_workers, stop_workers, threads_per_rank
from .plan import DropStorage, NewStorage, Shutdown, Step, send
from .shard import check_shardable, local_kv_heads, shard_model
from .watch import Watch, cause, outputs, summary
from .worker import ModelSource

log = logging.getLogger("tinyllm.distributed")


class TensorParallel:
    def __init__(self, config: ParallelConfig, model, source: ModelSource):
        """Start the local workers, join the group as rank 0 and shard `model` in place. Raises TinyLLMError
        (and leaves no process behind) if the model does not split or a rank fails to start."""
        n = config.tensor_parallel_size
        check_shardable(model.config, n)
        if torch.distributed.is_initialized():
            gc.collect()  # an LLM dropped in a reference cycle closes its group once the collector finds it
        if torch.distributed.is_initialized():
            raise TinyLLMError("this process already runs a tensor-parallel group; close that LLM first")
        self.config, self.model, self.error = config, model, None
        self.num_local_kv_heads = local_kv_heads(model.config.num_kv_heads, n)
        self._keys, self._drops = itertools.count(), []
        self._threads_before = torch.get_num_threads()
        self.workers, self.store, self.watch, self.comm = [], None, None, None
        self.folder = tempfile.mkdtemp(prefix="tinyllm-tp-")  # the workers' output, an in-memory model
        try:
            self._start(source)
        except BaseException as exc:
            stops = self.watch.account() if self.watch is not None and not isinstance(exc, TinyLLMError) else []
            self._tear_down(0.0)
            if isinstance(exc, (TinyLLMError, KeyboardInterrupt)):
                raise
            what = summary(stops) or cause(exc)
            raise TinyLLMError(
                f"the tensor-parallel group of {n} ranks failed to start: {what}{outputs(stops)}"
            ) from None
        atexit.register(self.close)

    def _start(self, source: ModelSource) -> None:
        """Serve the store, start the local ranks, wait (watching them) until every rank has loaded its
        model, then join the group and shard this rank's model."""
        config, n = self.config, self.config.tensor_parallel_size
        self.store = groups.open_store(0, n, config.master_addr, config.master_port, config.startup_timeout_s)
        if config.master_port is None:  # the free port the store took
            self.config = config = dataclasses.replace(config, master_port=self.store.port)
        self.workers = start_workers(config, source, self.folder)
        self.watch = Watch(self.store, n, self.workers)
        self.watch.wait_ready(config.startup_timeout_s, config.timeout_s)
        drop_model_file(self.folder)
        threads = threads_per_rank(config) if source.device == "cpu" else None
        if threads:
            torch.set_num_threads(threads)
        # every rank has loaded its model: from here on, a silent rank is waited for timeout_s, no longer
        self.comm = groups.join(0, n, self.store, source.device, config.timeout_s, config.timeout_s)
        shard_model(self.model, 0, n, self.comm.all_reduce)
        torch.distributed.barrier(group=self.comm.startup)

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
                    storage.resident,
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

    def check_ranks(self) -> None:
        """Between steps (an idle server): bring the group down with EngineDown if a rank is known to have
        stopped (exited, left a note, or went silent), so the server says so before a request finds out."""
        self.check_alive()
        if stops := self.watch.stopped(self.config.timeout_s):
            self._tear_down(0.0)
            self.error = f"the tensor-parallel group is down: {summary(stops)}{outputs(stops, noted=False)}"
            log.error(self.error)
            raise EngineDown(self.error)

    def check_alive(self) -> None:
        if self.error is not None:
            raise EngineDown(self.error)

    def fail(self, exc: BaseException):
        stops = self.watch.account()  # before we stop the rest
        self._tear_down(0.0)
        what = summary(stops) or self._no_rank_stopped(exc)
        self.error = f"the tensor-parallel group is down: {what} ({cause(exc)}){outputs(stops, noted=False)}"
        log.error(self.error)
        if isinstance(exc, KeyboardInterrupt):
            raise exc
        raise EngineDown(self.error) from exc

    def _no_rank_stopped(self, exc: BaseException) -> str:
        """Every rank lives: one is stuck in a collective (it timed out), or the driver failed on its own."""
        if any(word in str(exc).lower() for word in ("timed out", "timeout")):  # gloo says either
            return f"a rank did not answer within {self.config.timeout_s:g} s"
        return "rank 0 failed"

    def close(self) -> None:
        """Stop the workers and leave the group (idempotent)."""
        atexit.unregister(self.close)
        if self.error is None:
            self.error = "the tensor-parallel group was closed"
            with contextlib.suppress(Exception):  # a rank already gone: it is stopped below anyway
                send([Shutdown()], self.comm.control, self.config.timeout_s)
                self.watch.wait_stopped(JOIN_S)
            self._tear_down(JOIN_S)

    def _tear_down(self, grace_s: float) -> None:
        """Stop the local workers, leave the group and close the store (which ends any rank still beating)."""
        stop_workers(self.workers, grace_s)
        groups.leave(self.comm)
        self.store = self.watch = None
        shutil.rmtree(self.folder, ignore_errors=True)
        torch.set_num_threads(self._threads_before)


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
