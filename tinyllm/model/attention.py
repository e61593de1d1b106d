"""Grouped-query attention whose keys and values go through the forward's step (`step.attend`: store them,
then attend; model/step.py), whatever cache lies behind it. Optional pieces, switched on by the model family
and its config: biases on q/k/v and on the output, a per-head norm of q and k before rotation, sinks (a learned
logit per head, `sinks`), and the layer's AttentionSpec (scale, soft-cap, window, sinks), which the step honours."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from .rope import apply_rope
from .sdpa import PLAIN, AttentionSpec
from .step import ForwardStep


class GQAttention(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        layer_idx: int,
        *,
        bias: bool = False,
        qk_norm: type[nn.Module] | None = None,
        eps: float = 1e-6,
        spec: AttentionSpec = PLAIN,
        o_bias: bool = False,
        sinks: bool = False,
    ):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.layer_idx, self.spec = layer_idx, spec
        # Rows: H·D of q, then Hkv·D of k, then Hkv·D of v — one matmul reads x once.
        self.qkv_proj = nn.Linear(hidden_size, (num_heads + 2 * num_kv_heads) * head_dim, bias=bias)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=o_bias)
        if sinks:
            self.sinks = nn.Parameter(torch.zeros(num_heads))  # [H]
        if qk_norm is not None:  # over each head's D values, shared by all heads
            self.q_norm, self.k_norm = qk_norm(head_dim, eps), qk_norm(head_dim, eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, step: ForwardStep) -> torch.Tensor:
        """x [B, T, C] -> [B, T, C]; cos, sin: the rotary tables of the new tokens' positions."""
        B, T, _ = x.shape
        H, Hkv, D = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv_proj(x).view(B, T, H + 2 * Hkv, D).transpose(1, 2)  # [B, H+2Hkv, T, D]
        qk = qkv[:, : H + Hkv]  # [B, H+Hkv, T, D]
        if hasattr(self, "q_norm"):
            qk = torch.cat((self.q_norm(qk[:, :H]), self.k_norm(qk[:, H:])), dim=1)  # [B, H+Hkv, T, D]
        q, k = apply_rope(qk, cos, sin).split((H, Hkv), dim=1)  # [B, H, T, D], [B, Hkv, T, D]
        v = qkv[:, H + Hkv :]  # [B, Hkv, T, D]
        spec = replace(self.spec, sinks=self.sinks) if hasattr(self, "sinks") else self.spec  # the loaded tensor
        out = step.attend(self.layer_idx, q, k, v, spec)  # [B, H, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(B, T, H * D))  # [B, T, C]
