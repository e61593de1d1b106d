"""QuantWeight: one linear weight kept as its GGUF blocks, rows = output features."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .formats import FORMATS


@dataclass
class QuantWeight:
    """`data` is uint8 [N, row_bytes] in the file's block layout; it may be a zero-copy view of a read-only
    mmap, so nothing here ever writes to it. int8_activations: multiply it with the activations quantized to
    8 bits per 32 elements (opt-in, llama.cpp's arithmetic); with limbs 3, to three 8-bit limbs (24-bit
    activations: the product within float32's rounding, at the 8-bit kernels' speed where memory bounds them)."""

    data: torch.Tensor  # [N, K // block_size * type_size] uint8
    fmt: str  # a key of FORMATS
    shape: tuple[int, int]  # (N, K) = (out_features, in_features)
    int8_activations: bool = False
    limbs: int = 1  # 8-bit rows per activation row, where int8_activations

    def __post_init__(self):
        if self.limbs not in (1, 3):
            raise ValueError(f"limbs must be 1 (8-bit activations) or 3 (24-bit), got {self.limbs!r}")
        if self.fmt not in FORMATS:
            raise ValueError(f"unsupported quantization format {self.fmt!r}; supported: {', '.join(FORMATS)}")
        fmt = FORMATS[self.fmt]
        if len(self.shape) != 2 or any(int(s) <= 0 for s in self.shape):
            raise ValueError(f"shape must be two positive sizes (N, K), got {self.shape}")
        self.shape = (int(self.shape[0]), int(self.shape[1]))
        n, k = self.shape
        if k % fmt.block_size:
            raise ValueError(f"K={k} is not a multiple of the {self.fmt} block size {fmt.block_size}")
        if not isinstance(self.data, torch.Tensor):
            raise ValueError(f"data must be a torch.Tensor of uint8, got {type(self.data).__name__}")
        if self.data.dtype != torch.uint8 or self.data.dim() != 2:
            raise ValueError(
                f"data must be a 2-D uint8 tensor, got {self.data.dtype} with shape {tuple(self.data.shape)}"
            )
        if self.data.shape[0] != n:
            raise ValueError(f"data has {self.data.shape[0]} rows, expected N={n}")
        if self.data.shape[1] != self.row_bytes:
            raise ValueError(
                f"data rows have {self.data.shape[1]} bytes, expected {self.row_bytes} for K={k} in {self.fmt}"
            )

    @property
    def format(self):
        return FORMATS[self.fmt]

    @property
    def num_blocks_per_row(self) -> int:
        return self.shape[1] // FORMATS[self.fmt].block_size

    @property
    def row_bytes(self) -> int:
        return self.num_blocks_per_row * FORMATS[self.fmt].type_size

    def rows(self, index: torch.Tensor) -> QuantWeight:
        """The chosen rows (an embedding lookup, or Q/K rows reordered at load) as a new QuantWeight."""
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1)  # [R]
        picked = self.data.index_select(0, index)
        return QuantWeight(picked, self.fmt, (int(index.numel()), self.shape[1]), self.int8_activations, self.limbs)
