"""A quantized linear with a float bias (Qwen2's q/k/v): the block-format matmul, then the bias added."""

from __future__ import annotations

import torch
from torch import nn

from .quant_linear import QuantLinear


class BiasedQuantLinear(QuantLinear):
    def __init__(self, weights):
        super().__init__(weights)
        # Placeholder of the right shape; the loader assigns the real bias with the float weights.
        self.bias = nn.Parameter(torch.zeros(self.out_features), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.bias  # [..., N]
