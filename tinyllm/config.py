"""The model's architecture, read from metadata (GGUF `llama.*` keys or config.json)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import TinyLLMError

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def parse_dtype(value: str | torch.dtype, what: str = "dtype") -> torch.dtype:
    """A dtype name ("float32", "float16", "bfloat16") or one of those torch dtypes -> the torch dtype."""
    if isinstance(value, torch.dtype) and value in DTYPES.values():
        return value
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    raise TinyLLMError(f"{what} must be one of {', '.join(DTYPES)}, got {value!r}")


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of a Llama-family decoder. Validates itself on construction."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    rope_theta: float = 10000.0
    rope_dim: int | None = None  # rotated dims per head; None means all of head_dim
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    architecture: str = "llama"

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.rope_theta <= 0:
            raise ValueError(f"rope_theta must be positive, got {self.rope_theta}")
        rope_dim = self.head_dim if self.rope_dim is None else self.rope_dim
        if rope_dim <= 0 or rope_dim > self.head_dim or rope_dim % 2:
            raise ValueError(f"rope_dim must be even and in (0, head_dim={self.head_dim}], got {rope_dim}")
        if self.rms_norm_eps <= 0:
            raise ValueError(f"rms_norm_eps must be positive, got {self.rms_norm_eps}")

    @property
    def rotary_dim(self) -> int:
        return self.head_dim if self.rope_dim is None else self.rope_dim

    @property
    def context_length(self) -> int:
        return self.max_position_embeddings

    def kv_bytes_per_token(self, itemsize: int = 4) -> int:
        """Bytes of K and V one position costs across all layers: 2·L·Hkv·D·itemsize."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * itemsize
