"""The per-forward step: the one object a forward asks about its cache.

A forward over T new tokens takes one `ForwardStep`: their positions, the rows whose logits it returns, and
`attend`, each attention layer's "store this layer's new keys and values, then attend". Three kinds provide
it, and the model never asks which one it has:

    CausalStep   no cache: the new tokens attend to each other alone, causally (`model(ids)`)
    CacheStep    a contiguous cache (KVCache, PagedKVCache, LatentCache): update, then SDPA under its mask
    PagedBatch   the engine's ragged batch over the paged storage (model/paged_batch.py; the runner builds it)
"""

from __future__ import annotations

from typing import Protocol

import torch

from .sdpa import PLAIN, AttentionSpec, attention, window_mask

LAST = slice(-1, None)  # logit_rows: the last new token alone


class ForwardStep(Protocol):
    """What one forward over T new tokens (ids [B, T]) reads from its cache. A step is made for one forward:
    it reads the cache's state when made, before any layer stores.

    positions: [T] (or [B, T]) the new tokens' positions, for the rotary tables.
    logit_rows: the new tokens whose logits the forward returns, an index into T: None = every one, LAST =
        the last one, or a tensor of rows (the engine's sampled rows).
    attend(layer, q, k, v, spec): q [B, H, T, D] and this layer's new k, v [B, Hkv, T, D], rotated; stores
        k and v, then returns [B, H, T, D]: each query over the keys it may see (the stored ones up to its
        own position, within spec.window). Each attention layer calls it once a forward, in layer order.
    """

    positions: torch.Tensor
    logit_rows: torch.Tensor | slice | None

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: AttentionSpec = PLAIN
    ) -> torch.Tensor: ...


class SdpaStep:
    """A step whose `store` hands back every key a layer holds (T queries over S keys, the queries last) and
    whose attention is one SDPA under one mask per window, made once a step. MLA's attention, which stores
    latents rather than keys, calls `store` and `sdpa` itself."""

    _unmasked_is_causal: bool  # a mask of None: plainly causal (T over T) or every key visible

    def __init__(self, positions: torch.Tensor, logit_rows, mask: torch.Tensor | None, num_keys: int, device):
        self.positions, self.logit_rows = positions, logit_rows
        self._t_new, self._num_keys, self._device = positions.shape[-1], num_keys, device
        self._masks = {None: mask}  # window -> mask [T, S] or [B, 1, T, S], True = may attend

    def store(self, layer: int, *new: torch.Tensor) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def mask(self, window: int | None) -> torch.Tensor | None:
        """The step's mask narrowed to the window (sdpa.window_mask)."""
        if window not in self._masks:
            self._masks[window] = window_mask(self._masks[None], self._t_new, self._num_keys, window, self._device)
        return self._masks[window]

    def sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: AttentionSpec = PLAIN) -> torch.Tensor:
        """q [B, H, T, D] over every stored k, v [B, Hkv, S, D] -> [B, H, T, D]."""
        mask = self.mask(spec.window)
        return attention(q, k, v, mask, spec, is_causal=mask is None and self._unmasked_is_causal)

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: AttentionSpec = PLAIN
    ) -> torch.Tensor:
        k, v = self.store(layer, k, v)  # [B, Hkv, S, D]
        return self.sdpa(q, k, v, spec)  # [B, H, T, D]


class CausalStep(SdpaStep):
    """No cache: T new tokens at positions 0..T-1 see each other alone, causally; nothing is stored."""

    _unmasked_is_causal = True

    def __init__(self, t_new: int, device=None, logit_rows: torch.Tensor | slice | None = None):
        super().__init__(torch.arange(t_new, device=device), logit_rows, None, t_new, device)  # positions [T]

    def store(self, layer: int, *new: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return new


class CacheStep(SdpaStep):
    """A contiguous cache's step: anything with positions(T), mask(T) and update(layer, *new) -> everything
    stored (KVCache, PagedKVCache, LatentCache). The T new tokens follow the s positions the cache holds;
    query i sees keys 0..s+i. Positions and the mask are read here, before any layer appends."""

    _unmasked_is_causal = False

    def __init__(self, cache, t_new: int, logit_rows: torch.Tensor | slice | None = None):
        self.cache = cache
        mask = cache.mask(t_new)  # [T, S] or [B, 1, T, S], True = may attend
        num_keys = mask.shape[-1]
        if t_new == 1 and mask.dim() == 2:
            mask = None  # one new query of one sequence sees every stored key
        super().__init__(cache.positions(t_new), logit_rows, mask, num_keys, cache.device)  # positions [T] or [B, T]

    def store(self, layer: int, *new: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.cache.update(layer, *new)
