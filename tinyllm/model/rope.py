"""Rotary position embedding in the half-split layout (dims i and i + R/2 form a pair).

GGUF files store Q and K rows permuted for the interleaved layout; the loader undoes that, so this one
convention serves GGUF and safetensors weights alike.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..config import RopeScaling


def _linear(inv_freq: torch.Tensor, s: RopeScaling, theta: float) -> torch.Tensor:
    return inv_freq / s.factor


def _llama3(inv_freq: torch.Tensor, s: RopeScaling, theta: float) -> torch.Tensor:
    """Wavelengths longer than the original context / low_freq_factor are stretched by factor, those
    shorter than it / high_freq_factor kept, and the band between blended linearly in 1/wavelength."""
    old = s.original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq  # [R/2]
    stretched = torch.where(wavelen > old / s.low_freq_factor, inv_freq / s.factor, inv_freq)
    smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * stretched / s.factor + smooth * stretched
    medium = (wavelen >= old / s.high_freq_factor) & (wavelen <= old / s.low_freq_factor)
    return torch.where(medium, blended, stretched)  # [R/2]


def _yarn(inv_freq: torch.Tensor, s: RopeScaling, theta: float) -> torch.Tensor:
    """Dims turning fewer than beta_slow times over the original context are divided by factor, those turning
    more than beta_fast times kept, and a linear ramp over the dims between (as transformers computes it)."""
    dim = 2 * inv_freq.shape[0]  # R

    def dim_of(rotations: float) -> float:  # the dim that turns this many times over the original context
        return dim * math.log(s.original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dim_of(s.beta_fast), dim_of(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    high = high + 0.001 if low == high else high  # a one-dim ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32, device="cpu") - low) / (high - low)).clamp(0, 1)  # [R/2]
    keep = 1 - ramp  # 1 = the dim keeps its frequency
    pos_freqs = theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device="cpu") / dim)  # [R/2] as the reference
    return 1.0 / (s.factor * pos_freqs) * (1 - keep) + 1.0 / pos_freqs * keep  # [R/2]


SCALINGS = {"linear": _linear, "llama3": _llama3, "yarn": _yarn}


class RotaryEmbedding(nn.Module):
    """Frequencies theta^(-2i/R), then the config's scaling, or divided by per-frequency factors (GGUF's
    rope_freqs tensor, which llama.cpp writes for Llama 3.1's scaling); cos and sin times YaRN's attention
    factor (`attention_factor`, 1 for the other scalings)."""

    def __init__(
        self,
        rotary_dim: int,
        theta: float,
        scaling: RopeScaling | None = None,
        freq_factors: tuple[float, ...] | None = None,
    ):
        super().__init__()
        self.rotary_dim = rotary_dim
        # On the CPU even inside a meta-device build: a meta arange imports torch's Python decompositions.
        steps = torch.arange(0, rotary_dim, 2, dtype=torch.float32, device="cpu")  # [R/2]
        inv_freq = 1.0 / (theta ** (steps / rotary_dim))
        if scaling is not None:
            inv_freq = SCALINGS[scaling.kind](inv_freq, scaling, theta)
        if freq_factors is not None:
            inv_freq = inv_freq / torch.tensor(freq_factors, dtype=torch.float32, device="cpu")
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # [R/2]
        self.attention_factor = scaling.yarn_attention_factor if scaling is not None and scaling.kind == "yarn" else 1.0

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for absolute positions [T] or [B, T]: each [..., T, R]. The first half of sin is
        negated, so that rotating is x * cos + swap_halves(x) * sin (see apply_rope)."""
        angles = positions.to(torch.float32)[..., None] * self.inv_freq  # [..., T, R/2]
        cos, sin = angles.cos(), angles.sin()  # [..., T, R/2]
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        return torch.cat((cos, cos), dim=-1).to(dtype), torch.cat((-sin, sin), dim=-1).to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first R dims of x [B, H, T, D] by cos/sin [T, R] or [B, T, R] (sin's first half negated,
    as cos_sin gives it); the rest pass through. Pair (a, b) becomes (a cos - b sin, b cos + a sin)."""
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, R]
    rotary_dim = cos.shape[-1]
    if rotary_dim == x.shape[-1]:
        return x * cos + x.roll(rotary_dim // 2, dims=-1) * sin  # [B, H, T, D]
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    out = rot * cos + rot.roll(rotary_dim // 2, dims=-1) * sin  # [B, H, T, R]
    return torch.cat((out, rest), dim=-1)
