"""Linear and embedding layers whose weight stays in a GGUF block format (a QuantWeight).

A linear's forward is one qmatmul, equal to F.linear with the dequantized weight up to float32 summation
order. A fused projection whose parts came in different formats (some files store v in a wider format than
q and k) keeps one QuantWeight per part and concatenates their outputs. An embedding lookup dequantizes only
the looked-up rows; a tied head multiplies by the embedding's own QuantWeight.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..kernels import QuantWeight, dequantize, native_available, qmatmul
from ..kernels.qmatmul import lookup_rows


class QuantLinear(nn.Module):
    def __init__(self, weights: QuantWeight | Sequence[QuantWeight]):
        super().__init__()
        parts = [weights] if isinstance(weights, QuantWeight) else list(weights)
        in_features = {w.shape[1] for w in parts}
        if not parts or len(in_features) != 1:
            raise ValueError(f"parts of a quantized linear must share in_features, got {sorted(in_features)}")
        self.parts = parts
        self.in_features = parts[0].shape[1]
        self.out_features = sum(w.shape[0] for w in parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., K] -> [..., N]."""
        if len(self.parts) == 1:
            return qmatmul(x, self.parts[0])
        return torch.cat([qmatmul(x, w) for w in self.parts], dim=-1)  # [..., N]

    def dequantized(self) -> torch.Tensor:
        """The weight as float32 [N, K]: the reference this layer equals."""
        return torch.cat([dequantize(w) for w in self.parts])

    def extra_repr(self) -> str:
        formats = "+".join(w.fmt for w in self.parts)
        return f"in_features={self.in_features}, out_features={self.out_features}, format={formats}"


class QuantEmbedding(nn.Module):
    def __init__(self, weight: QuantWeight, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.weight, self.dtype = weight, dtype
        self.num_embeddings, self.embedding_dim = weight.shape

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [...] -> [..., C], dequantizing only the rows looked up."""
        rows = lookup_rows(self.weight, ids.reshape(-1))  # [n, C]
        return rows.view(*ids.shape, self.embedding_dim).to(self.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, format={self.weight.fmt}"


def quant_weights(model: nn.Module) -> list[QuantWeight]:
    """Every distinct QuantWeight the model holds (a tied head shares its embedding's)."""
    seen: dict[int, QuantWeight] = {}
    for module in model.modules():
        if isinstance(module, QuantLinear):
            seen.update((id(w), w) for w in module.parts)
        elif isinstance(module, QuantEmbedding):
            seen[id(module.weight)] = module.weight
    return list(seen.values())


def activations(model: nn.Module) -> dict:
    """For `LLM.info()`: the formats whose matmuls take integer activations, and the activations' bits (32:
    float32; 8 or 24: one or three 8-bit limbs)."""
    integer = [w for w in quant_weights(model) if w.int8_activations]
    return {
        "integer_activations": sorted({w.fmt for w in integer}),
        "activation_bits": 8 * max(w.limbs for w in integer) if integer else 32,
    }


def runs_native(model: nn.Module) -> bool:
    """Whether the model's quantized linears run in the native kernels (it has some, and they are built)."""
    return any(isinstance(m, QuantLinear) for m in model.modules()) and native_available()


def weight_summary(model: nn.Module) -> dict:
    """Formats kept in memory -> {tensors, bytes}; float parameters by dtype (shared ones counted once)."""
    out: dict[str, dict[str, int]] = {}
    for w in quant_weights(model):
        entry = out.setdefault(w.fmt, {"tensors": 0, "bytes": 0})
        entry["tensors"] += 1
        entry["bytes"] += w.data.numel()
    for p in model.parameters():
        entry = out.setdefault(str(p.dtype).removeprefix("torch."), {"tensors": 0, "bytes": 0})
        entry["tensors"] += 1
        entry["bytes"] += p.numel() * p.element_size()
    return out
