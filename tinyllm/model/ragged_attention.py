"""Attention for a ragged batch: several sequences' new tokens flattened into one row.

The batch puts every decode query first (one token per sequence), then each prefill chunk. Decode
queries attend in one batched SDPA call over their keys gathered from the paged pool and padded to the
longest context (padding masked out); each prefill chunk attends with the offset causal mask.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F


@dataclass
class PrefillSlice:
    q_start: int              # first row of the chunk in the flat batch
    q_len: int                # T: new positions
    kv_slots: torch.Tensor    # [S] slots of positions 0..S-1 (S = start + T)
    mask: torch.Tensor        # [T, S] offset causal, True = may attend


@dataclass
class RaggedLayout:
    num_decode: int                      # Bd: decode rows come first
    decode_slots: torch.Tensor | None    # [Bd, Smax] slots, padded
    decode_mask: torch.Tensor | None     # [Bd, 1, 1, Smax] True = real key
    prefills: list[PrefillSlice]


def ragged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, layout: RaggedLayout) -> torch.Tensor:
    """q [1, H, N, D]; k_pool, v_pool [slots, Hkv, D] of one layer (new keys already written) -> [1, H, N, D]."""
    H, Hkv = q.shape[1], k_pool.shape[1]
    gqa = H != Hkv
    out = torch.empty_like(q)
    Bd = layout.num_decode
    if Bd:
        qd = q[0, :, :Bd].transpose(0, 1)[:, :, None]  # [Bd, H, 1, D]
        kd = k_pool[layout.decode_slots].to(q.dtype).transpose(1, 2)  # [Bd, Hkv, Smax, D]
        vd = v_pool[layout.decode_slots].to(q.dtype).transpose(1, 2)  # [Bd, Hkv, Smax, D]
        od = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=layout.decode_mask, enable_gqa=gqa)  # [Bd, H, 1, D]
        out[0, :, :Bd] = od[:, :, 0].transpose(0, 1)
    for p in layout.prefills:
        qp = q[:, :, p.q_start:p.q_start + p.q_len]  # [1, H, T, D]
        kp = k_pool[p.kv_slots].to(q.dtype).transpose(0, 1)[None]  # [1, Hkv, S, D]
        vp = v_pool[p.kv_slots].to(q.dtype).transpose(0, 1)[None]  # [1, Hkv, S, D]
        out[:, :, p.q_start:p.q_start + p.q_len] = F.scaled_dot_product_attention(
            qp, kp, vp, attn_mask=p.mask, enable_gqa=gqa)
    return out
