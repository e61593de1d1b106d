"""A plain greedy draw (token, its log-probability, the entropy) over rows of float32 logits in one native
call (csrc/greedy.cpp): two passes over each row where the torch ops take seven, rows spread over threads."""

from __future__ import annotations

import ctypes

import torch

from . import native
from .threads import kernel_threads


def greedy_rows(logits: torch.Tensor) -> tuple[list[int], list[float], list[float]] | None:
    """logits [b, V] -> (tokens, logprobs, entropies) per row, the first maximum as the token; None when the
    native kernels are not built. Raises ValueError naming the first row with a NaN or no finite value."""
    lib = native.library()
    if lib is None:
        return None
    rows = logits if logits.dtype is torch.float32 and logits.is_contiguous() else logits.float().contiguous()
    b, v = rows.shape  # [b, V]
    # ctypes arrays, not tensors: after a step has streamed the weights through the caches, each torch op here
    # costs tens of microseconds
    tokens, logprobs, entropies = (ctypes.c_int64 * b)(), (ctypes.c_double * b)(), (ctypes.c_double * b)()
    status = lib.tl_greedy_rows(rows.data_ptr(), b, v, tokens, logprobs, entropies, kernel_threads())
    if status != 0:
        raise ValueError(f"row {-1 - status} of the logits holds a NaN or no finite value")
    return list(tokens), list(logprobs), list(entropies)
