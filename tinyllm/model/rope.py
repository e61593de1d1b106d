"""Rotary position embedding in the half-split layout (dims i and i + R/2 form a pair).

GGUF files store Q and K rows permuted for the interleaved layout; the loader undoes that, so this one
convention serves GGUF and safetensors weights alike.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..config import RopeScaling


def _llama3(inv_freq: torch.Tensor, s: RopeScaling) -> torch.Tensor:
    """Wavelengths longer than the original context / low_freq_factor are stretched by factor, those
    shorter than it / high_freq_factor kept, and the band between blended linearly in 1/wavelength."""
    old = s.original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq  # [R/2]
    stretched = torch.where(wavelen > old / s.low_freq_factor, inv_freq / s.factor, inv_freq)
    smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * stretched / s.factor + smooth * stretched
    medium = (wavelen >= old / s.high_freq_factor) & (wavelen <= old / s.low_freq_factor)
    return torch.where(medium, blended, stretched)  # [R/2]


SCALINGS = {"linear": lambda inv_freq, s: inv_freq / s.factor, "llama3": _llama3}


class RotaryEmbedding(nn.Module):
    """Frequencies theta^(-2i/R), then the config's scaling, or divided by per-frequency factors (GGUF's
    rope_freqs tensor, which llama.cpp writes for Llama 3.1's scaling)."""

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
            inv_freq = SCALINGS[scaling.kind](inv_freq, scaling)
        if freq_factors is not None:
            inv_freq = inv_freq / torch.tensor(freq_factors, dtype=torch.float32, device="cpu")
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # [R/2]

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for absolute positions [T] or [B, T]: each [..., T, R]. The first half of sin is
        negated, so that rotating is x * cos + swap_halves(x) * sin (see apply_rope)."""
        angles = positions.to(torch.float32)[..., None] * self.inv_freq  # [..., T, R/2]
        sin = angles.sin()
        return torch.cat((angles, angles), dim=-1).cos().to(dtype), torch.cat((-sin, sin), dim=-1).to(dtype)


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
