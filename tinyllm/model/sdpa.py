"""Scaled dot-product attention with a layer's options (scale, logit soft-cap, sinks) and the sliding-window masks.

Masks are boolean, True = may attend. Keys are indexed by their slot in the key sequence handed to
attention, which for every cache here is the key's position (a padded batch shifts queries and keys
alike), so a window is a band on slot indices: query at slot q sees key slot k iff q - W < k <= q.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn import functional as F


@dataclass(frozen=True)
class AttentionSpec:
    """One layer's attention options: scale (None = 1/sqrt(D)), softcap of the logits (None = none),
    window in positions, the query's own included (None = all earlier positions), and sinks: [H] a learned
    logit per query head that joins its softmax's denominator and takes no value (gpt-oss; None = none; the
    layer's parameter, set by its module at each forward)."""

    scale: float | None = None
    softcap: float | None = None
    window: int | None = None
    sinks: torch.Tensor | None = field(default=None, compare=False)

    def __post_init__(self):
        for name in ("scale", "softcap", "window"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"attention {name} must be positive or None, got {value!r}")


PLAIN = AttentionSpec()


def soft_cap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """x, or cap·tanh(x/cap) (logits kept within ±cap); the same shape."""
    return x if cap is None else torch.tanh(x / cap) * cap


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    spec: AttentionSpec = PLAIN,
    is_causal: bool = False,
) -> torch.Tensor:
    """q [B, H, T, D], k and v [B, Hkv, S, D] -> [B, H, T, D]; mask broadcastable to [B, H, T, S]. With sinks,
    q's heads may be [B, Hkv, G, D] (the G query heads of a kv head as its G queries), the sinks [Hkv·G] alike."""
    H, Hkv = q.shape[1], k.shape[1]
    if spec.softcap is None and spec.sinks is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, scale=spec.scale, enable_gqa=Hkv != H
        )
    if Hkv != H:
        k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)  # [B, H, S, D]
    scale = spec.scale if spec.scale is not None else q.shape[-1] ** -0.5
    scores = (q @ k.transpose(-1, -2)) * scale  # [B, H, T, S]
    scores = soft_cap(scores, spec.softcap)
    if is_causal:
        mask = window_mask(None, q.shape[2], k.shape[2], None, q.device)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    if spec.sinks is None:
        return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v  # [B, H, T, D]
    return _with_sinks(scores.float(), spec.sinks).to(q.dtype) @ v  # [B, H, T, D]


def _with_sinks(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """Softmax over scores [B, H, T, S] and one more logit per head, its sink, whose share is dropped."""
    sink = sinks.float().view(scores.shape[1], -1, 1).expand(*scores.shape[:-1], 1)  # [B, H, T, 1]
    return torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]  # [B, H, T, S]


def window_mask(
    mask: torch.Tensor | None, t_new: int, num_keys: int, window: int | None, device=None
) -> torch.Tensor | None:
    """Restrict a mask over the last t_new queries of num_keys keys ([T, S] or [B, 1, T, S]; None =
    causal) to the window. With window None the mask comes back as it is (None stays None)."""
    if window is None and mask is not None:
        return mask
    device = mask.device if mask is not None else device
    q = torch.arange(num_keys - t_new, num_keys, device=device)[:, None]  # [T, 1] query slots
    k = torch.arange(num_keys, device=device)[None, :]  # [1, S]
    band = k <= q if window is None else (k <= q) & (k > q - window)  # [T, S]
    return band if mask is None else mask & band
