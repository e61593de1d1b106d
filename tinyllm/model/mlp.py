"""Gated feed-forward: down(act(gate(x)) * up(x)), with gate and up as one projection split after it.
SwiGLU when act is SiLU (Llama, Qwen, Phi-3), GeGLU with the tanh-approximate GELU (Gemma)."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

ACTIVATIONS = {"silu": F.silu, "gelu_tanh": partial(F.gelu, approximate="tanh")}


class GatedMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, activation: str = "silu"):
        super().__init__()
        self.intermediate_size = intermediate_size
        self.act = ACTIVATIONS[activation]
        # Rows [0, I) are gate_proj, rows [I, 2I) up_proj: one matmul reads x once.
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)  # [..., I] each
        return self.down_proj(self.act(gate) * up)


class SwiGLU(GatedMLP):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__(hidden_size, intermediate_size, "silu")
