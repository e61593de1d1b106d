"""The worker processes this machine starts (ranks 1 .. num_local_ranks - 1), and their end.

Workers are spawned (a fresh interpreter: no forked torch threads) and daemonic, so they die with an
interpreter that exits normally; one whose driver is killed sees its connections close and exits by itself.
"""

from __future__ import annotations

import multiprocessing
import os

from .config import ParallelConfig
from .worker import ModelSource, worker_main

JOIN_S = 5.0  # a worker asked to stop gets this long before it is killed


def threads_per_rank(config: ParallelConfig) -> int | None:
    """On the CPU, ranks on one machine share its cores; an explicit OMP_NUM_THREADS wins."""
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    return max(1, (os.cpu_count() or 1) // config.num_local_ranks)


def start_workers(config: ParallelConfig, source: ModelSource) -> list[multiprocessing.Process]:
    ctx = multiprocessing.get_context("spawn")
    threads = threads_per_rank(config) if source.device == "cpu" else None
    processes = []
    try:
        for rank in range(1, config.num_local_ranks):
            p = ctx.Process(
                target=worker_main,
                args=(rank, config, source, threads),
                name=f"tinyllm-tp-rank{rank}",
                daemon=True,
            )
            p.start()
            processes.append(p)
    except BaseException:
        stop_workers(processes, 0.0)
        raise
    return processes


def stop_workers(processes: list[multiprocessing.Process], grace_s: float = JOIN_S) -> None:
    """Wait up to grace_s for them to exit, then kill what is left (SIGKILL also ends a stopped process)."""
    for p in processes:
        p.join(grace_s)
        if p.is_alive():
            p.kill()
            p.join()


def describe_exits(processes: list[multiprocessing.Process]) -> str:
    """'rank 1 exited with signal 9' for each local worker that has ended, or ''."""
    gone = []
    for p in processes:
        p.join(0.2)  # a worker whose connection just closed may still be dying
    for rank, p in enumerate(processes, start=1):
        code = p.exitcode
        if code is not None:
            gone.append(f"rank {rank} exited with " + (f"signal {-code}" if code < 0 else f"code {code}"))
    return "; ".join(gone)
