"""A plain greedy draw (token, its log-probability, the entropy) over rows of float32 logits in one native
call (csrc/greedy.cpp): two passes over each row where the torch ops take seven, rows spread over threads."""

from __future__ import annotations

import torch

from . import native
from .threads import kernel_threads


def greedy_rows(logits: torch.Tensor) -> tuple[list[int], list[float], list[float]] | None:
    """logits [b, V] -> (tokens, logprobs, entropies) per row, the first maximum as the token; None when the
    native kernels are not built. Raises ValueError naming the first row with a NaN or no finite value."""
    lib = native.library()
    if lib is None:
        return None
    rows = logits.float().contiguous()  # [b, V]
    b, v = rows.shape
    tokens = torch.empty(b, dtype=torch.long)
    out = torch.empty(2, b, dtype=torch.float64)  # logprobs, entropies
    pointers = (tokens.data_ptr(), out[0].data_ptr(), out[1].data_ptr())
    status = lib.tl_greedy_rows(rows.data_ptr(), b, v, *pointers, kernel_threads())
    if status != 0:
        raise ValueError(f"row {-1 - status} of the logits holds a NaN or no finite value")
    logprobs, entropies = out.tolist()
    return tokens.tolist(), logprobs, entropies
