"""qmatmul: x @ W^T with W kept as GGUF blocks. Native kernels when built, else dequantize + F.linear."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import native
from .qweight import QuantWeight
from .reference import dequantize


def native_available() -> bool:
    """Whether the compiled kernels are in use (False with TINYLLM_NATIVE=0 or when the build failed)."""
    return native.library() is not None


def qmatmul(x: torch.Tensor, w: QuantWeight) -> torch.Tensor:
    """x [..., K] -> [..., N], equal to F.linear(x, dequantize(w)) up to float32 summation order."""
    n, k = w.shape
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} features, expected K={k} for a weight of shape {w.shape}")
    dtype = x.dtype
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k).to(torch.float32).contiguous()  # [M, K]
    lib = native.library()
    if lib is None:
        y = F.linear(x2, dequantize(w))  # [M, N]
    else:
        y = native.matmul(lib, x2, w)  # [M, N]
    return y.reshape(*lead, n).to(dtype)
