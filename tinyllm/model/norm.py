"""RMSNorm: scale by the reciprocal root-mean-square, computed in float32 whatever the storage dtype."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)  # one fused call
        # Half precision rounds the normalized value before the scale, as the reference does.
        x32 = F.rms_norm(x.float(), self.weight.shape, None, self.eps)
        return self.weight * x32.to(x.dtype)


class RMSNormPlusOne(RMSNorm):
    """Gemma's RMSNorm: the weight stores the scale minus one, so the scale is (1 + weight)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = F.rms_norm(x.float(), self.weight.shape, None, self.eps)
        return (x32 * (1.0 + self.weight.float())).to(x.dtype)


NORMS = {"rms": RMSNorm, "rms_plus_one": RMSNormPlusOne}
