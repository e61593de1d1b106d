"""Meeting and leaving the process group: the rendezvous store, the backend from the device, and three groups.

The store (rank 0 serves it at master_addr:master_port) carries every rank's notes and heartbeat (watch.py)
from before the group exists until it is gone. A rank joins the group once its model is loaded, so the
driver watches the slow part of the start-up on the store, where a lost rank cannot make it wait. The groups:
  default  (joining and the start-up barrier; a worker's patience startup_timeout_s: it joins as soon as it is
           ready and waits there for the slowest rank, the driver joins last)
  control  (gloo, startup_timeout_s ... idle for days): the driver's step plans; a worker waits here while
           the engine is idle, so its timeout must outlast any idle time.
  compute  (gloo on the CPU, NCCL on CUDA, timeout_s): the all-reduces inside a forward; a rank that stops
           answering mid-step is declared hung after timeout_s.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from ..errors import TinyLLMError

IDLE_TIMEOUT = timedelta(days=30)  # a worker may wait this long for the next step


def backend_for(device: str | torch.device) -> str:
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def rank_device(device: str, rank: int) -> str:
    """A rank's device: "cuda" without an index means one GPU per rank (rank modulo the GPUs here)."""
    d = torch.device(device)
    if d.type != "cuda" or d.index is not None:
        return device
    return f"cuda:{rank % torch.cuda.device_count()}"


@dataclass
class AllReduceStats:
    """All-reduces this rank ran and the seconds it spent in them (the benchmark reads these)."""

    count: int = 0
    seconds: float = 0.0

    def reset(self) -> None:
        self.count, self.seconds = 0, 0.0


@dataclass
class Comm:
    rank: int
    world_size: int
    startup: object  # the default group: joining and loading, startup_s
    control: object
    compute: object
    stats: AllReduceStats = field(default_factory=AllReduceStats)

    def all_reduce(self, x: torch.Tensor) -> None:
        """Sum x over the ranks, in place (a row-parallel output)."""
        start = time.perf_counter()
        dist.all_reduce(x, group=self.compute)
        self.stats.count += 1
        self.stats.seconds += time.perf_counter() - start


def open_store(rank: int, world_size: int, addr: str, port: int | None, timeout_s: float) -> dist.Store:
    """The rendezvous store: rank 0 serves it at addr:port (port None: a free one, read back from `.port`),
    the others connect to it, retrying for timeout_s. Under torchrun, the store it set up ($MASTER_PORT)."""
    timeout = timedelta(seconds=timeout_s)
    try:
        if "TORCHELASTIC_RUN_ID" in os.environ:
            return next(dist.rendezvous("env://", rank, world_size, timeout=timeout))[0]
        if rank == 0:
            return dist.TCPStore(addr, port or 0, world_size, is_master=True, timeout=timeout, wait_for_workers=False)
        return dist.TCPStore(addr, port, world_size, is_master=False, timeout=timeout)
    except (RuntimeError, ValueError) as exc:  # DistNetworkError and DistStoreError are RuntimeErrors
        where = f"listen on {addr}:{port}" if rank == 0 else f"reach the driver at {addr}:{port} within {timeout_s:g} s"
        raise TinyLLMError(f"rank {rank} cannot {where} ({str(exc).splitlines()[0]})") from None


def join(rank: int, world_size: int, store: dist.Store, device, timeout_s: float, startup_s: float) -> Comm:
    """Join the group as `rank` through `store`; returns once every rank has joined (or raises after startup_s)."""
    if dist.is_initialized():
        raise RuntimeError("this process is already in a torch.distributed group")
    backend = backend_for(device)
    if backend == "nccl":
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=startup_s)
    )
    try:
        control = dist.new_group(backend="gloo", timeout=max(IDLE_TIMEOUT, timedelta(seconds=startup_s)))
        compute = dist.new_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    except BaseException:
        dist.destroy_process_group()
        raise
    return Comm(rank, world_size, dist.group.WORLD, control, compute)


def leave(comm: Comm | None) -> None:
    """Destroy the groups and drop our handles on them: a live handle keeps the store, and its port, open."""
    if dist.is_initialized():
        dist.destroy_process_group()
    if comm is not None:
        comm.startup = comm.control = comm.compute = None
