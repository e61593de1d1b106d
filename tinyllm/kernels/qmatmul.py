"""qmatmul: x @ W^T with W kept as GGUF blocks. Native kernels when built, else dequantize + F.linear."""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F

from . import native
from .q8act import int8_linear
from .qweight import QuantWeight
from .reference import dequantize

# From this many activation rows on, a tile of weight rows is dequantized to float32 and multiplied by the BLAS
# (torch.mm). Below it the native kernels decode each weight once per call into a small buffer and run a
# register tile over it (M >= 8). Per shape the two are level on either side of this M, but a whole step of
# the model's matmuls at M = 32 ran faster native: the BLAS path writes and reads back every weight as float32
# each step (figures: docs/benchmarks.md, "Figures behind choices in the code").
BLAS_MIN_M = 128
TILE_BYTES = 8 << 20  # float32 bytes of one dequantized tile: stays in the last-level cache


def native_available() -> bool:
    """Whether the compiled kernels are in use (False with TINYLLM_NATIVE=0 or when the build failed)."""
    return native.library() is not None


def qmatmul(x: torch.Tensor, w: QuantWeight) -> torch.Tensor:
    """x [..., K] -> [..., N], equal to F.linear(x, dequantize(w)) up to float32 summation order."""
    n, k = w.shape
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} features, expected K={k} for a weight of shape {w.shape}")
    lib = native.library()
    if lib is None:
        return (int8_linear(x, w) if w.int8_activations else F.linear(x.float(), dequantize(w))).to(x.dtype)
    if x.dtype is not torch.float32 or not x.is_contiguous():
        return qmatmul(x.float().contiguous(), w).to(x.dtype)
    m = x.numel() // k
    y = torch.empty(m, n)  # [M, N]; sizes as ints: building it from a torch.Size costs several times more
    if w.int8_activations:  # every M: one arithmetic per row whatever the batch
        if m > 0:
            native.matmul_into(lib, x, m, w, y)
    elif m >= BLAS_MIN_M:
        blas_matmul(lib, x.view(m, k), w, y)
    elif m > 0:
        native.matmul_into(lib, x, m, w, y)
    return y if x.dim() == 2 else y.view(x.shape[:-1] + (n,))  # [..., N]


def lookup_rows(w: QuantWeight, index: torch.Tensor) -> torch.Tensor:
    """Rows `index` [R] of the weight as float32 [R, K] (an embedding lookup), bit-identical to dequantizing
    them with the reference: the native decoder when built (one call; a lone row needs no gathered copy)."""
    lib = native.library()
    if lib is None:
        return dequantize(w.rows(index))
    if index.numel() == 1:
        row = int(index.reshape(-1)[0])
        if not 0 <= row < w.shape[0]:
            raise IndexError(f"row {row} is out of range for a weight of {w.shape[0]} rows")
        return native.dequantize_rows(lib, w, row, row + 1)  # [1, K]
    picked = w.rows(index)
    return native.dequantize_rows(lib, picked, 0, picked.shape[0])  # [R, K]


def blas_matmul(lib, x: torch.Tensor, w: QuantWeight, y: torch.Tensor) -> None:
    """y [M, N] = x [M, K] @ W^T by tiles of weight rows: native dequantize, then torch.mm into y's columns."""
    n, k = w.shape
    rows = min(n, max(8, TILE_BYTES // (4 * k)))
    tile = scratch(rows * k)
    for n0 in range(0, n, rows):
        n1 = min(n, n0 + rows)
        wt = native.dequantize_rows(lib, w, n0, n1, tile[: (n1 - n0) * k].view(n1 - n0, k))  # [R, K]
        if n1 - n0 == n:
            torch.mm(x, wt.t(), out=y)
        else:
            y[:, n0:n1] = x @ wt.t()


_local = threading.local()


def scratch(numel: int) -> torch.Tensor:
    """A float32 buffer of at least numel elements, kept per thread: a fresh multi-MB tensor per call costs more
    in page faults than dequantizing into it."""
    buf = getattr(_local, "tile", None)
    if buf is None or buf.numel() < numel:
        buf = _local.tile = torch.empty(numel)
    return buf
