"""The 8-bit KV format (q8_0, the name llama.cpp gives the same layout): each run of 32 values of a key or value
vector is kept as 32 int8 and one float16 scale d, a value being q * d.

    d = float16(max |x| / 127)      q = clamp(round_half_even(x / d), -127, 127)      (q = 0 where d is 0)

Reads widen q * d exactly (an 8-bit integer times an 11-bit significand fits float32's 24 bits), so the module
path here and the native step (model/native/csrc/kv.h, which computes the same q and d bit for bit) attend to
the same values. A cache in this format is chosen with kv_dtype "q8_0" and held as torch.int8 storage.
"""

from __future__ import annotations

import torch

from ..errors import TinyLLMError

Q8_BLOCK = 32  # values per scale
Q8_NAME = "q8_0"


def is_q8(dtype: torch.dtype) -> bool:
    return dtype == torch.int8


def check_q8_head_dim(d_head: int) -> None:
    if d_head % Q8_BLOCK:
        raise TinyLLMError(f"kv_dtype q8_0 needs a head_dim that is a multiple of {Q8_BLOCK}, got {d_head}")


def bytes_per_value(dtype: torch.dtype) -> float:
    """Bytes one stored key or value element takes, its share of the scale included."""
    if is_q8(dtype):
        return 1 + 2 / Q8_BLOCK
    return torch.empty(0, dtype=dtype).element_size()


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] (D a multiple of 32) -> q int8 [..., D] and d float16 [..., D / 32]."""
    blocks = x.float().unflatten(-1, (-1, Q8_BLOCK))  # [..., D/32, 32]
    amax = blocks.abs().amax(-1)  # [..., D/32]
    d = (amax / torch.full_like(amax, 127.0)).to(torch.float16)  # a tensor divisor: no reciprocal shortcut
    wide = d.float()[..., None]  # [..., D/32, 1]
    q = torch.where(wide == 0, 0.0, (blocks / wide).round().clamp(-127, 127))
    return q.to(torch.int8).flatten(-2), d


def dequantize(q: torch.Tensor, d: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """q int8 [..., D], d float16 [..., D / 32] -> q * d [..., D] in dtype (exact in float32)."""
    wide = q.float().unflatten(-1, (-1, Q8_BLOCK)) * d.float()[..., None]
    return wide.flatten(-2).to(dtype)
