"""SwiGLU feed-forward: down(silu(gate(x)) * up(x)), with gate and up as one projection split after it."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class SwiGLU(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.intermediate_size = intermediate_size
        # Rows [0, I) are gate_proj, rows [I, 2I) up_proj: one matmul reads x once.
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)  # [..., I] each
        return self.down_proj(F.silu(gate) * up)
