"""Attention for a ragged batch: several sequences' new tokens flattened into one row.

The batch puts every decode query first (one token per sequence), then each prefill chunk. Decode
queries attend in one batched SDPA call over their keys gathered from the paged pool and padded to the
longest context (padding masked out); each prefill chunk attends with the offset causal mask. A layer
with a sliding window cuts both to it (`windowed`): its queries gather and score only the keys in their window.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .sdpa import PLAIN, AttentionSpec, attention, window_mask


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
    """The same batch with every query's keys narrowed to the last `window` positions: slot tables and masks
    cut to the columns some query of the group may see (masks made on `device`, where the batch's tensors
    live), so a sliding layer gathers and scores at most `window` keys a decode query."""
    if window is None:
        return layout
    slots, mask = layout.decode_slots, layout.decode_mask
    if layout.num_decode:
        slots, mask = _window_decodes(slots, mask, window, device)
    return RaggedLayout(layout.num_decode, slots, mask, [_window_prefill(p, window, device) for p in layout.prefills])


def _window_decodes(slots: torch.Tensor | slice, mask: torch.Tensor | None, window: int, device):
    """Decode rows' slot table [Bd, S] (or one row's run of slots) and mask cut to each row's last `window` keys."""
    n = _num_slots(slots)
    if n <= window:
        return slots, mask
    if isinstance(slots, slice):  # one sequence over a run of slots: its last `window`
        return slice(slots.stop - window, slots.stop), None
    lengths = mask.sum(-1).view(-1, 1) if mask is not None else torch.full((slots.shape[0], 1), n, device=device)
    cols = (lengths - window).clamp(min=0) + torch.arange(window, device=device)  # [Bd, W]
    keep = cols < lengths  # [Bd, W]: a row shorter than the window pads its tail
    table = slots.gather(1, cols.clamp(max=n - 1))  # [Bd, W]
    return table, None if bool(keep.all()) else keep.view(-1, 1, 1, window)


def _window_prefill(p: PrefillSlice, window: int, device) -> PrefillSlice:
    """A prefill chunk's mask narrowed to the window, and its keys cut before the first one any query sees."""
    num_keys = p.mask.shape[-1]
    mask = window_mask(p.mask, p.q_len, num_keys, window, device)  # [T, S]
    cut = max(0, num_keys - p.q_len - window + 1)  # the first query sees keys from here on
    if not cut:
        return replace(p, mask=mask)
    kv = p.kv_slots
    kv = slice(kv.start + cut, kv.stop) if isinstance(kv, slice) else kv[cut:]
    return replace(p, kv_slots=kv, mask=mask[:, cut:])


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
