"""Attention for a ragged batch: several sequences' new tokens flattened into one row.

The batch puts every decode query first (one token per sequence), then each prefill chunk. Decode
queries attend in one batched SDPA call over their keys gathered from the paged pool and padded to the
longest context (padding masked out); each prefill chunk attends with the offset causal mask. A layer
with a sliding window narrows both masks to it (`windowed`), so no query sees a key outside its window.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .sdpa import PLAIN, AttentionSpec, attention, window_decode_mask, window_mask


@dataclass
class PrefillSlice:
    q_start: int  # first row of the chunk in the flat batch
    q_len: int  # T: new positions
    kv_slots: torch.Tensor | slice  # [S] slots of positions 0..S-1 (S = start + T), or one run of slots
    mask: torch.Tensor  # [T, S] offset causal, True = may attend


@dataclass
class RaggedLayout:
    num_decode: int  # Bd: decode rows come first
    decode_slots: torch.Tensor | slice | None  # [Bd, Smax] slots, padded; a slice when Bd = 1 and consecutive
    decode_mask: torch.Tensor | None  # [Bd, 1, 1, Smax] True = real key; None when nothing is padded
    prefills: list[PrefillSlice]


def _num_slots(slots: torch.Tensor | slice) -> int:
    return slots.stop - slots.start if isinstance(slots, slice) else slots.shape[-1]


def windowed(layout: RaggedLayout, window: int | None, device=None) -> RaggedLayout:
    """The same batch with every mask narrowed to the last `window` positions of each query (masks made on
    `device`, where the batch's tensors live)."""
    if window is None:
        return layout
    decode_mask = layout.decode_mask
    if layout.num_decode:
        decode_mask = window_decode_mask(decode_mask, _num_slots(layout.decode_slots), window, device)
    prefills = [
        replace(p, mask=window_mask(p.mask, p.q_len, p.mask.shape[-1], window, device)) for p in layout.prefills
    ]
    return RaggedLayout(layout.num_decode, layout.decode_slots, decode_mask, prefills)


def ragged_attention(q: torch.Tensor, gather, layout: RaggedLayout, spec: AttentionSpec = PLAIN) -> torch.Tensor:
    """q [1, H, N, D]; gather(slots [..., S]) -> keys, values [..., S, Hkv, D] of this layer, new keys already
    written -> [1, H, N, D]. The layout's masks must already honour spec.window (see `windowed`)."""
    H = q.shape[1]
    Bd = layout.num_decode
    if Bd and not layout.prefills:  # decodes only (the common step): their output is the whole output
        return _decode_attention(q, gather, layout, spec).reshape(Bd, H, -1).transpose(0, 1)[None]  # [1, H, Bd, D]
    out = torch.empty_like(q)
    if Bd:
        out[0, :, :Bd] = _decode_attention(q, gather, layout, spec).reshape(Bd, H, -1).transpose(0, 1)
    for p in layout.prefills:
        qp = q[:, :, p.q_start : p.q_start + p.q_len]  # [1, H, T, D]
        kp, vp = gather(p.kv_slots)  # [S, Hkv, D] each
        kp, vp = kp.transpose(0, 1)[None], vp.transpose(0, 1)[None]  # [1, Hkv, S, D]
        out[:, :, p.q_start : p.q_start + p.q_len] = attention(qp, kp, vp, p.mask, spec)
    return out


def _decode_attention(q: torch.Tensor, gather, layout: RaggedLayout, spec: AttentionSpec) -> torch.Tensor:
    """The decode queries (the first Bd rows of q [1, H, N, D]) over their keys -> [Bd, Hkv, G, D]."""
    H, Bd = q.shape[1], layout.num_decode
    kd, vd = gather(layout.decode_slots)  # [Bd, Smax, Hkv, D] each ([Smax, Hkv, D] from a slice)
    if kd.dim() == 3:
        kd, vd = kd[None], vd[None]  # [1, Smax, Hkv, D]
    kd, vd = kd.transpose(1, 2), vd.transpose(1, 2)  # [Bd, Hkv, Smax, D]
    Hkv, D = kd.shape[1], kd.shape[3]
    # The G = H / Hkv query heads sharing a kv head act as G queries of that head: one plain SDPA,
    # the same sums as GQA, and several times faster than enable_gqa in half precision on CPU.
    qd = q[0, :, :Bd].transpose(0, 1).reshape(Bd, Hkv, H // Hkv, D)  # [Bd, Hkv, G, D]
    return attention(qd, kd, vd, layout.decode_mask, spec)  # [Bd, Hkv, G, D]
