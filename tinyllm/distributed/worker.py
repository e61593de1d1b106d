"""A worker rank: load the model, join the group, shard the model, then run every step the driver broadcasts.

A worker holds one paged KV pool per driver engine, with only its own KV heads, and asks its forward for no
logits rows. From the moment it reaches the driver's store it beats (watch.Heartbeat), so the driver can tell
it is alive, and it ends when the driver is gone. It loads its model before it joins the group (the driver
watches the loading on the store), says when it is ready, and leaves a note saying why it stops. It exits on
Shutdown, and on any error (the driver gone, a peer gone, a collective timed out): then the driver's next
collective fails and the driver shuts the group down.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
from dataclasses import dataclass

import torch
from torch import nn

from ..cache.paged_cache import PagedStorage
from ..engine.runner import StepInputs, execute
from . import group as groups
from .config import ParallelConfig
from .plan import DropStorage, NewStorage, Shutdown, Step, receive
from .shard import shard_model
from .watch import Heartbeat, cause, leave_note, ready_key

log = logging.getLogger("tinyllm.distributed")


@dataclass
class ModelSource:
    """How a rank gets the whole model before sharding it: load it from `path`, take `module` (a model built
    in memory, on the driver) or load `module_file` (that model as torch.save wrote it for a local worker)."""

    path: str | None = None
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    weights: str | None = None
    quantize: str | None = None
    module: nn.Module | None = None
    module_file: str | None = None

    def load(self) -> nn.Module:
        if self.module is not None:
            return self.module
        if self.module_file is not None:
            return torch.load(self.module_file, map_location=self.device, weights_only=False)
        from ..loading.loader import load

        return load(self.path, self.dtype, self.device, self.weights, self.quantize, keep_blocks=True).model  # to shard


def worker_main(rank: int, config: ParallelConfig, source: ModelSource) -> None:
    """Entry point of a worker process (`tinyllm worker`, which the driver also runs for its local ranks)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle; it shuts us down
    n = config.tensor_parallel_size
    store = groups.open_store(rank, n, config.master_addr, config.master_port, config.startup_timeout_s)
    Heartbeat(store.clone(), rank)
    try:
        source = dataclasses.replace(source, device=groups.rank_device(source.device, rank))
        model = source.load()
        store.set(ready_key(rank), "")
        comm = groups.join(rank, n, store, source.device, config.timeout_s, config.startup_timeout_s)
        shard_model(model, rank, comm.world_size, comm.all_reduce)
        torch.distributed.barrier(group=comm.startup)  # the driver's start ends once every rank is sharded
        serve(model, comm, torch.device(source.device))
    except Exception as exc:
        log.exception("tensor-parallel rank %d stopped", rank)
        leave_note(store, rank, cause(exc))
        sys.stderr.flush()
        os._exit(1)  # without destroying the group: the peers see the connection close at once
    # Told to shut down: exit without leaving the group (that would wait on the others), and without the
    # interpreter's teardown, where the live gloo group's threads abort the process (exit status -6).
    leave_note(store, rank, "shut down")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@torch.inference_mode()
def serve(model: nn.Module, comm: groups.Comm, device: torch.device) -> None:
    storages: dict[int, PagedStorage] = {}
    no_rows = torch.empty(0, dtype=torch.long, device=device)  # the driver alone needs logits
    while True:
        for message in receive(comm.control):
            if isinstance(message, Shutdown):
                return
            if isinstance(message, NewStorage):
                storages[message.key] = PagedStorage(
                    message.num_layers,
                    message.num_kv_heads,
                    message.head_dim,
                    message.num_blocks,
                    message.block_size,
                    message.dtype,
                    device,
                    message.resident,
                )
            elif isinstance(message, DropStorage):
                storages.pop(message.key, None)
            elif isinstance(message, Step):
                execute(model, storages[message.key], to_device(message.inputs, device), no_rows)


def to_device(inputs: StepInputs, device: torch.device) -> StepInputs:
    """The plan's tensors on this rank's device (a no-op on the CPU)."""
    if device.type == "cpu":
        return inputs

    def move(value):
        if isinstance(value, torch.Tensor):
            return value.to(device)
        if dataclasses.is_dataclass(value):
            fields = {f.name: move(getattr(value, f.name)) for f in dataclasses.fields(value)}
            return dataclasses.replace(value, **fields)
        if isinstance(value, list):
            return [move(v) for v in value]
        return value

    return move(inputs)
