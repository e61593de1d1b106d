"""Gated feed-forward: down(act(gate(x)) * up(x)), with gate and up as one projection split after it.
SwiGLU when act is SiLU (Llama, Qwen, Phi-3), GeGLU with the tanh-approximate GELU (Gemma), and gpt-oss's
clamped SwiGLU, which clamps both halves and adds one to up (its projections carry biases)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

ACTIVATIONS = {"silu": F.silu, "gelu_tanh": partial(F.gelu, approximate="tanh")}


def clamped_swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float, alpha: float) -> torch.Tensor:
    """gpt-oss's: gate clamped above at limit and up within ±limit, then gate·σ(alpha·gate)·(up + 1); [..., I]."""
    gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return gate * torch.sigmoid(gate * alpha) * (up + 1)


def _act_times_up(gate: torch.Tensor, up: torch.Tensor, act: Callable) -> torch.Tensor:
    return act(gate) * up  # [..., I]


def gated(activation: str, limit: float | None = None, alpha: float | None = None) -> Callable:
    """(gate, up) -> the MLP's hidden values, for a family.ACTIVATIONS kind (limit, alpha: clamped_swiglu's).
    Partials of module-level functions, so a model pickles (tensor parallelism sends it to its workers)."""
    if activation == "clamped_swiglu":
        return partial(clamped_swiglu, limit=limit, alpha=alpha)
    return partial(_act_times_up, act=ACTIVATIONS[activation])


class GatedMLP(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        activation: str = "silu",
        *,
        bias: bool = False,
        limit: float | None = None,
        alpha: float | None = None,
    ):
        super().__init__()
        self.intermediate_size = intermediate_size
        self.gated = gated(activation, limit, alpha)
        # Rows [0, I) are gate_proj, rows [I, 2I) up_proj: one matmul reads x once.
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)  # [..., I] each
        return self.down_proj(self.gated(gate, up))


class SwiGLU(GatedMLP):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__(hidden_size, intermediate_size, "silu")
