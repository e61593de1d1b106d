"""Activations quantized to 8 bits per 32 elements (opt-in, weights="native-int8"), or to three 8-bit limbs
(weights="native-int24"): the plain PyTorch form of what `csrc/q8act.cpp` does, used as its reference and as
the fallback when no kernels are built.

Per 32-element block of an activation row: d = max|x| / 127 and q = round_half_even(x * (1 / d)), in float32
as the kernel computes them, so the two agree bit for bit. A weight block then meets (q, d) as
d_w * d_x * sum(q_w * q_x) (+ m_w * d_x * sum q_x): the dequantized activation q * d times the dequantized
weight, summed in another order.

Limbs: limb 0 quantizes x, limb l the remainder r = x - sum of the limbs before it's q * d, formed with one
rounding (as the kernel's fma; here in float64, where q * d and the difference are exact). Each limb leaves a
remainder of at most half its d, and its d is at most 1/254 of the previous one's: three limbs give the row up
to 2^-24 of each block's largest magnitude, float32's own resolution there."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .qweight import QuantWeight
from .reference import dequantize

BLOCK = 32


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [..., K] float32, K a multiple of 32 -> q int8 [..., K], d float32 [..., K/32], sum int32 [..., K/32].
    A block holding a NaN or an infinity gets d = NaN and q = 0, so what it meets is NaN; a block whose d would
    be subnormal (every |x| < 127 * 2^-126, where 1 / d may overflow) counts as zeros."""
    if x.shape[-1] % BLOCK:
        raise ValueError(f"x has {x.shape[-1]} features, expected a multiple of {BLOCK}")
    blocks = x.float().reshape(*x.shape[:-1], -1, BLOCK)  # [..., KB, 32]
    amax = blocks.abs().amax(dim=-1, keepdim=True)  # [..., KB, 1]
    finite = amax.isfinite()
    d = torch.where(finite, amax / 127.0, torch.full_like(amax, float("nan")))
    d = torch.where(d < torch.finfo(torch.float32).tiny, torch.zeros_like(d), d)  # subnormal: the block is zeros
    inv = torch.where(finite & (d != 0), 1.0 / d, torch.zeros_like(d))
    q = torch.round(blocks * inv).nan_to_num(0.0).to(torch.int8)  # [..., KB, 32]
    total = q.sum(dim=-1, dtype=torch.int32)  # [..., KB]
    return q.reshape(x.shape), d.squeeze(-1), total


def dequantize_activations(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """q [..., K], d [..., K/32] -> float32 [..., K]: q * d per block."""
    blocks = q.float().reshape(*q.shape[:-1], -1, BLOCK) * d.unsqueeze(-1)  # [..., KB, 32]
    return blocks.reshape(q.shape)


def quantize_limbs(x: torch.Tensor, limbs: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """x [..., K] float32 -> `limbs` quantizations (q, d, sum) as quantize_activations gives, of x and then of
    the remainder each leaves."""
    out, rest = [], x.float()
    for _ in range(limbs):
        q, d, total = quantize_activations(rest)
        out.append((q, d, total))
        taken = q.double().reshape(*q.shape[:-1], -1, BLOCK) * d.double().unsqueeze(-1)  # [..., KB, 32]
        rest = (rest.double() - taken.reshape(q.shape)).float()
    return out


def int8_linear(x: torch.Tensor, w: QuantWeight) -> torch.Tensor:
    """x [..., K] -> [..., N]: the dequantized 8-bit activations (each limb) times the dequantized weight, the
    limbs' products summed last first."""
    dense = dequantize(w)
    parts = [F.linear(dequantize_activations(q, d), dense) for q, d, _ in quantize_limbs(x, w.limbs)]
    y = parts[-1]
    for part in reversed(parts[:-1]):
        y = y + part
    return y
