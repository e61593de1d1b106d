"""Quantized weights for the kernel tests: gguf's own quantizer where it has one, else random bytes."""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType, quants

from tinyllm.kernels import FORMATS, QuantWeight
from tinyllm.kernels.reference import SCALE_OFFSETS


def random_blocks(fmt: str, n: int, k: int, seed: int, scale: float | None = None) -> np.ndarray:
    """uint8 [N, row_bytes] of random bytes whose fp16 scale fields are finite: every bit pattern of the
    quants occurs. `scale`: draw the fp16 fields uniformly in (-scale, scale) instead of from all finite values,
    and E8M0 scales up to it."""
    f = FORMATS[fmt]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n, k // f.block_size, f.type_size), dtype=np.uint8)
    for off in SCALE_OFFSETS[fmt]:
        if scale is None:
            bits = rng.integers(0, 1 << 16, raw.shape[:2], dtype=np.uint16)
            inf_or_nan = (bits & 0x7C00) == 0x7C00
            bits[inf_or_nan] ^= 0x4000  # clear the top exponent bit there: finite
            field = bits.view(np.uint8).reshape(*raw.shape[:2], 2)
        else:
            field = (
                rng.uniform(-scale, scale, raw.shape[:2]).astype(np.float16).view(np.uint8).reshape(*raw.shape[:2], 2)
            )
        raw[..., off : off + 2] = field
    for off in f.e8m0_offsets:  # every scale 2^(e - 128); with `scale`, the 24 powers of two up to it
        if scale is not None:
            top = 128 + int(np.floor(np.log2(scale)))
            raw[..., off] = rng.integers(top - 23, top + 1, raw.shape[:2])
    return raw.reshape(n, -1)


def quantized(fmt: str, n: int, k: int, seed: int) -> tuple[np.ndarray, str]:
    """(uint8 [N, row_bytes], how it was made): gguf.quants.quantize of normal values when gguf supports the
    format, else random blocks with small scales."""
    rng = np.random.default_rng(seed)
    try:
        raw = quants.quantize(rng.standard_normal((n, k)).astype(np.float32), GGMLQuantizationType[fmt])
        return raw, "gguf.quantize"
    except NotImplementedError:
        return random_blocks(fmt, n, k, seed, scale=0.05), "random"


def weight(fmt: str, n: int, k: int, seed: int = 0) -> QuantWeight:
    return QuantWeight(torch.from_numpy(quantized(fmt, n, k, seed)[0]), fmt, (n, k))
