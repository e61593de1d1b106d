"""Pure-PyTorch dequantization of a quantized weight, by its format's reference dequantizer (dequantizers.py):
the reference every native kernel is tested against and the fallback path when none is built."""

from __future__ import annotations

import torch

from .formats import FORMATS
from .qweight import QuantWeight

# The tables the tests and checks read, derived from FORMATS.
DEQUANTIZE_BLOCKS = {name: f.dequantize for name, f in FORMATS.items()}
SCALE_OFFSETS = {name: list(f.scale_offsets) for name, f in FORMATS.items()}


def dequantize_blocks(blocks: torch.Tensor, fmt: str) -> torch.Tensor:
    """uint8 [num_blocks, type_size] -> float32 [num_blocks, block_size]."""
    return DEQUANTIZE_BLOCKS[fmt](blocks)


def dequantize(w: QuantWeight) -> torch.Tensor:
    """The whole weight as float32 [N, K]."""
    f = FORMATS[w.fmt]
    n, k = w.shape
    blocks = w.data.reshape(n * (k // f.block_size), f.type_size)  # [N * K/bs, ts]
    return dequantize_blocks(blocks, w.fmt).reshape(n, k)  # [N, K]
