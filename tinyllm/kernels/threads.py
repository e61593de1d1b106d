"""How many threads the native kernels use, and a scope in which torch's own ops run on one thread.

A batch-1 (or small-batch) decode step is ~900 tiny torch ops around the native matmuls. A few of them (the
attention, the argmax over the vocabulary) open an OpenMP parallel region whose barrier waits for every
thread; on a machine with more runnable threads than cores a descheduled OpenMP thread stalls the step for a
whole time slice. Inside `torch_single_threaded()` torch runs those ops on the calling thread while the
native kernels, whose pool never waits for a helper that has not shown up, keep torch's thread count.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_local = threading.local()  # .count: the kernels' thread count inside a scope of this thread


def kernel_threads() -> int:
    """Threads for the next native call: torch's count, or the count it had when the scope began."""
    return getattr(_local, "count", None) or torch.get_num_threads()


@contextmanager
def torch_single_threaded() -> Iterator[None]:
    """Within: torch ops run on one thread, the native kernels on torch's thread count from before."""
    count = torch.get_num_threads()
    outer = getattr(_local, "count", None)
    if count == 1:
        yield
        return
    _local.count = outer or count
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(count)
        _local.count = outer
