"""The GGUF tensor types tinyllm loads, as data. The block formats the kernels execute are one table, FORMATS
(elements and bytes per block, GGML type id, where the fp16 scales sit, the reference dequantizer); the C++
kernels list the same formats in csrc/formats/list.h (tests/kernels/test_formats.py checks they agree). The other
types load as what they are: float tensors, or blocks with no kernel, rewritten at load into a format that has
one or dequantized to float32."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import dequantizers


@dataclass(frozen=True)
class QuantFormat:
    name: str
    block_size: int  # elements per block
    type_size: int  # bytes per block
    ggml_type: int  # GGMLQuantizationType value in the GGUF file, and the id the C++ kernels take
    scale_offsets: tuple[int, ...]  # byte offsets of each block's fp16 scale/min fields
    dequantize: Callable[[torch.Tensor], torch.Tensor]  # uint8 [NB, type_size] -> float32 [NB, block_size]
    e8m0_offsets: tuple[int, ...] = ()  # byte offsets of each block's E8M0 scale (a power of two, always finite)

    def __post_init__(self):
        if self.block_size <= 0 or self.type_size <= 0:
            raise ValueError(f"block_size and type_size must be positive, got {self.block_size} and {self.type_size}")
        if any(not 0 <= off <= self.type_size - 2 for off in self.scale_offsets):
            raise ValueError(f"scale_offsets must lie in a block of {self.type_size} bytes, got {self.scale_offsets}")
        if any(not 0 <= off < self.type_size for off in self.e8m0_offsets):
            raise ValueError(f"e8m0_offsets must lie in a block of {self.type_size} bytes, got {self.e8m0_offsets}")


FORMATS: dict[str, QuantFormat] = {
    f.name: f
    for f in [
        QuantFormat("Q4_0", 32, 18, 2, (0,), dequantizers.q4_0),
        QuantFormat("Q4_1", 32, 20, 3, (0, 2), dequantizers.q4_1),
        QuantFormat("Q5_0", 32, 22, 6, (0,), dequantizers.q5_0),
        QuantFormat("Q5_1", 32, 24, 7, (0, 2), dequantizers.q5_1),
        QuantFormat("Q8_0", 32, 34, 8, (0,), dequantizers.q8_0),
        QuantFormat("Q4_K", 256, 144, 12, (0, 2), dequantizers.q4_k),
        QuantFormat("Q5_K", 256, 176, 13, (0, 2), dequantizers.q5_k),
        QuantFormat("Q6_K", 256, 210, 14, (208,), dequantizers.q6_k),
        QuantFormat("MXFP4", 32, 17, 39, (), dequantizers.mxfp4, e8m0_offsets=(0,)),
    ]
}

FLOAT_TYPES = ("F32", "F16", "BF16")  # loaded as float tensors
# Block types without a kernel: Q3_K is rewritten at load as blocks of the format named, holding the same values
# (loading/transcode.py); Q2_K is dequantized to float32 at load.
TRANSCODED = {"Q3_K": "Q6_K"}
DEQUANTIZED = ("Q2_K",)
SUPPORTED_TYPES = FLOAT_TYPES + tuple(FORMATS) + tuple(TRANSCODED) + DEQUANTIZED  # the types we promise to load
