"""Give back the resident pages of a model file's mapping that nothing reads after loading.

Loading reads every block of a GGUF file once (the block tables are checked), so the whole file ends up
resident. Afterwards only the weights that the float kernels multiply in place still read their pages: the
parts of a fused projection were copied, a weight with 8-bit activations runs on its packed copy (its blocks
are read only for an embedding row or a repack), and a dequantized weight is a float copy. The other pages are
dropped from this process (madvise MADV_DONTNEED on the read-only file mapping: the file's data is never lost,
a later read maps the page again from the page cache), so resident memory is what the model uses.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys

import numpy as np
from torch import nn

from ..model.quant_linear import quant_weights

MADV_DONTNEED = 4  # Linux


def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    fn = libc.madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def unread_ranges(start: int, stop: int, kept: list[tuple[int, int]], page: int) -> list[tuple[int, int]]:
    """Whole pages of [start, stop) that overlap none of the kept [a, b) ranges."""
    out, at = [], start
    for a, b in sorted(kept) + [(stop, stop)]:
        lo = -(-at // page) * page  # first whole page from `at`
        hi = min(a, stop) // page * page  # last page boundary before `a`
        if hi > lo:
            out.append((lo, hi))
        at = max(at, b)
    return out


def release_unread_pages(mapping: np.memmap, model: nn.Module) -> int:
    """Drop this process's resident pages of `mapping` outside the weights that the float kernels read in place;
    returns the bytes of address range released (0 where the OS has no madvise)."""
    advise = _madvise()
    if advise is None or mapping.size == 0:
        return 0
    start = mapping.ctypes.data
    stop = start + mapping.size
    kept = []
    for w in quant_weights(model):
        ptr = w.data.data_ptr()
        if not w.int8_activations and start <= ptr < stop:
            kept.append((ptr, ptr + w.data.numel() * w.data.element_size()))
    released = 0
    for lo, hi in unread_ranges(start, stop, kept, mmap.PAGESIZE):
        if advise(lo, hi - lo, MADV_DONTNEED) == 0:
            released += hi - lo
    return released
