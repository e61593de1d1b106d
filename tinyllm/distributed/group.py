"""Joining and leaving the process group: the backend from the device, a control and a compute group.

Besides the default group (joining and loading, startup_s), two groups over the same ranks with different
patience:
  control  (gloo, startup_timeout_s ... idle for days): the driver's step plans; a worker waits here while
           the engine is idle, so its timeout must outlast any idle time.
  compute  (gloo on the CPU, NCCL on CUDA, timeout_s): the all-reduces inside a forward; a rank that stops
           answering mid-step is declared hung after timeout_s.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

IDLE_TIMEOUT = timedelta(days=30)  # a worker may wait this long for the next step


def backend_for(device: str | torch.device) -> str:
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def rank_device(device: str, rank: int) -> str:
    """A rank's device: "cuda" without an index means one GPU per rank (rank modulo the GPUs here)."""
    d = torch.device(device)
    if d.type != "cuda" or d.index is not None:
        return device
    return f"cuda:{rank % torch.cuda.device_count()}"


def free_port(addr: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


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


def join(rank: int, world_size: int, addr: str, port: int, device, timeout_s: float, startup_s: float) -> Comm:
    """Join the group as `rank`; returns once every rank has joined (or raises after startup_s)."""
    if dist.is_initialized():
        raise RuntimeError("this process is already in a torch.distributed group")
    backend = backend_for(device)
    if backend == "nccl":
        torch.cuda.set_device(torch.device(device))
    # under torchrun its agent already serves the rendezvous store at $MASTER_PORT: join that one
    launched = "TORCHELASTIC_RUN_ID" in os.environ
    dist.init_process_group(
        backend,
        init_method="env://" if launched else f"tcp://{addr}:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=startup_s),
    )
    try:
        control = dist.new_group(backend="gloo", timeout=max(IDLE_TIMEOUT, timedelta(seconds=startup_s)))
        compute = dist.new_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    except BaseException:
        dist.destroy_process_group()
        raise
    return Comm(rank, world_size, dist.group.WORLD, control, compute)


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
