"""Multi-head latent attention (MLA): keys and values come from one compressed latent per position, plus
one rotary key shared by all heads, so the cache holds r + dR numbers per position instead of 2·Hkv·D.
A small model built on it exercises LatentCache as its hook: its forward takes a contiguous step
(model/step.py: `CacheStep` over a LatentCache, or `CausalStep`), whose `store` keeps the latents and whose
`sdpa` attends over the keys and values expanded from them."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .llama import DecoderLayer
from .norm import RMSNorm
from .rope import RotaryEmbedding, apply_rope
from .step import CausalStep, SdpaStep


@dataclass(frozen=True)
class MLAConfig:
    vocab_size: int = 128
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    d_latent: int = 16  # r: the compressed KV latent
    d_nope: int = 16  # per-head key width without rotation
    d_rope: int = 8  # dR: the shared rotary key
    d_value: int = 16
    max_position_embeddings: int = 128
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5


class MLAttention(nn.Module):
    def __init__(self, c: MLAConfig, layer_idx: int):
        super().__init__()
        self.c, self.layer_idx = c, layer_idx
        self.q_proj = nn.Linear(c.hidden_size, c.num_heads * (c.d_nope + c.d_rope), bias=False)
        self.kv_down = nn.Linear(c.hidden_size, c.d_latent, bias=False)
        self.k_rope_proj = nn.Linear(c.hidden_size, c.d_rope, bias=False)
        self.k_up = nn.Linear(c.d_latent, c.num_heads * c.d_nope, bias=False)
        self.v_up = nn.Linear(c.d_latent, c.num_heads * c.d_value, bias=False)
        self.o_proj = nn.Linear(c.num_heads * c.d_value, c.hidden_size, bias=False)

    def forward(self, x, cos, sin, step: SdpaStep):
        c, (B, T, _) = self.c, x.shape
        H = c.num_heads
        q = self.q_proj(x).view(B, T, H, c.d_nope + c.d_rope).transpose(1, 2)  # [B, H, T, dn+dR]
        q = torch.cat((q[..., : c.d_nope], apply_rope(q[..., c.d_nope :], cos, sin)), dim=-1)
        latent = self.kv_down(x)  # [B, T, r]
        k_rope = apply_rope(self.k_rope_proj(x)[:, None], cos, sin)[:, 0]  # [B, T, dR]
        latent, k_rope = step.store(self.layer_idx, latent, k_rope)  # [B, S, r], [B, S, dR]
        S = latent.shape[1]
        k_nope = self.k_up(latent).view(B, S, H, c.d_nope).transpose(1, 2)  # [B, H, S, dn]
        k = torch.cat((k_nope, k_rope[:, None].expand(B, H, S, c.d_rope)), dim=-1)  # [B, H, S, dn+dR]
        v = self.v_up(latent).view(B, S, H, c.d_value).transpose(1, 2)  # [B, H, S, dv]
        out = step.sdpa(q, k, v)  # [B, H, T, dv]
        return self.o_proj(out.transpose(1, 2).reshape(B, T, H * c.d_value))  # [B, T, C]


class MLAForCausalLM(nn.Module):
    """Same forward contract as LlamaForCausalLM, with a CacheStep over a LatentCache as the step."""

    def __init__(self, c: MLAConfig):
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, i, attention=MLAttention(c, i)) for i in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.rotary = RotaryEmbedding(c.d_rope, c.rope_theta)

    def forward(self, ids: torch.Tensor, step: SdpaStep | None = None) -> torch.Tensor:
        """ids [B, T] -> logits of the step's logit_rows [B, R, V] (every row without a step)."""
        step = CausalStep(ids.shape[1], ids.device) if step is None else step
        x = self.embed_tokens(ids)  # [B, T, C]
        cos, sin = self.rotary.cos_sin(step.positions, x.dtype)  # [T, dR]
        for layer in self.layers:
            x = layer(x, cos, sin, step)
        if step.logit_rows is not None:
            x = x[:, step.logit_rows]  # [B, R, C]
        return self.lm_head(self.norm(x)).float()  # [B, R, V]
