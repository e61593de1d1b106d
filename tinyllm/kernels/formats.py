"""The GGUF block formats the kernels execute, as data: elements per block, bytes per block, GGML type id."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QuantFormat:
    name: str
    block_size: int  # elements per block
    type_size: int  # bytes per block
    ggml_type: int  # GGMLQuantizationType value in the GGUF file

    def __post_init__(self):
        if self.block_size <= 0 or self.type_size <= 0:
            raise ValueError(f"block_size and type_size must be positive, got {self.block_size} and {self.type_size}")


FORMATS: dict[str, QuantFormat] = {
    f.name: f
    for f in [
        QuantFormat("Q4_0", 32, 18, 2),
        QuantFormat("Q4_1", 32, 20, 3),
        QuantFormat("Q5_0", 32, 22, 6),
        QuantFormat("Q5_1", 32, 24, 7),
        QuantFormat("Q8_0", 32, 34, 8),
        QuantFormat("Q4_K", 256, 144, 12),
        QuantFormat("Q5_K", 256, 176, 13),
        QuantFormat("Q6_K", 256, 210, 14),
    ]
}
