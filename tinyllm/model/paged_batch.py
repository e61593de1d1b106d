"""The per-step cache object of the engine's ragged batch: the new tokens' positions, and each layer's "store
the new keys and values at their slots, then attend" over the paged storage (`ragged_attention`). The engine's
runner builds one per forward; the model's attention sees `is_ragged` and calls `attend`."""

from __future__ import annotations

import torch

from ..cache.paged_cache import PagedStorage
from .ragged_attention import RaggedLayout, ragged_attention, windowed
from .sdpa import AttentionSpec


class PagedBatch:
    """The cache object the model sees for one engine step (a ragged batch over the paged storage)."""

    is_ragged = True

    def __init__(
        self, storage: PagedStorage, slot_mapping: torch.Tensor, positions: torch.Tensor, layout: RaggedLayout
    ):
        self.storage, self.slot_mapping, self._positions, self.layout = storage, slot_mapping, positions, layout
        self._windowed = {None: layout}  # window -> the layout with its masks narrowed, made once per step

    def positions(self, t_new: int) -> torch.Tensor:
        return self._positions  # [N]

    def mask(self, t_new: int) -> None:
        return None  # masks live in the layout, per group

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: AttentionSpec | None = None
    ) -> torch.Tensor:
        """Write the new k, v [1, Hkv, N, D] at their slots, then attend q [1, H, N, D] -> [1, H, N, D]."""
        spec = spec or AttentionSpec()
        self.storage.write(layer, self.slot_mapping, k[0].transpose(0, 1), v[0].transpose(0, 1))
        if spec.window not in self._windowed:
            self._windowed[spec.window] = windowed(self.layout, spec.window, self.storage.device)
        layout = self._windowed[spec.window]
        return ragged_attention(q, lambda slots: self.storage.gather(layer, slots, q.dtype), layout, spec)
