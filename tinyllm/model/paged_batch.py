"""The engine's step (a `ForwardStep`, model/step.py) over a ragged batch: the new tokens' positions, the rows
to sample, and each layer's "store the new keys and values at their slots, then attend" over the paged storage
(`ragged_attention`). The engine's runner builds one per forward."""

from __future__ import annotations

import torch

from ..cache.paged_cache import PagedStorage
from .ragged_attention import RaggedLayout, ragged_attention, windowed
from .sdpa import PLAIN, AttentionSpec


class PagedBatch:
    """The step the model sees for one engine step (a ragged batch of N new tokens over the paged storage)."""

    def __init__(
        self,
        storage: PagedStorage,
        slot_mapping: torch.Tensor | slice,
        positions: torch.Tensor,
        layout: RaggedLayout,
        logit_rows: torch.Tensor | slice | None = None,
    ):
        self.storage, self.slot_mapping, self.layout = storage, slot_mapping, layout
        self.positions, self.logit_rows = positions, logit_rows  # [N]; rows of N, None = all
        self._windowed = {None: layout}  # window -> the layout with its masks narrowed, made once per step

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: AttentionSpec = PLAIN
    ) -> torch.Tensor:
        """Write the new k, v [1, Hkv, N, D] at their slots, then attend q [1, H, N, D] -> [1, H, N, D]."""
        self.storage.write(layer, self.slot_mapping, k[0].transpose(0, 1), v[0].transpose(0, 1))
        if spec.window not in self._windowed:
            self._windowed[spec.window] = windowed(self.layout, spec.window, self.storage.device)
        layout = self._windowed[spec.window]
        return ragged_attention(q, lambda slots: self.storage.gather(layer, slots, q.dtype), layout, spec)
