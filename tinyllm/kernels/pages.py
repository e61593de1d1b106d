"""Advice to the kernel about a buffer's pages (Linux madvise; elsewhere nothing happens)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

import torch

MADV_DONTNEED = 4
MADV_HUGEPAGE = 14
HUGE_PAGE = 2 << 20


@functools.cache
def madvise():
    """libc's madvise(address, length, advice) -> 0, or None where the OS has none."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    fn = libc.madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def empty_huge(nbytes: int) -> torch.Tensor:
    """An uninitialised uint8 buffer whose whole 2 MB spans are asked to be huge pages before anything touches
    them (transparent huge pages in "madvise" mode): writing a large buffer once then faults a page per 2 MB
    instead of one per 4 KB, which on the virtual machines measured cost several microseconds each."""
    out = torch.empty(nbytes, dtype=torch.uint8)
    advise = madvise()
    if advise is not None and nbytes >= HUGE_PAGE:
        start = out.data_ptr()
        lo, hi = -(-start // HUGE_PAGE) * HUGE_PAGE, (start + nbytes) // HUGE_PAGE * HUGE_PAGE
        if hi > lo:
            advise(lo, hi - lo, MADV_HUGEPAGE)  # advice only: a refusal changes nothing but the speed
    return out
