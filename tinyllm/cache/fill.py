"""Per-layer fill counts, committed length, positions, the offset mask and rollback, shared by the caches.

Terms: a layer's *fill* is how many positions it holds; the *committed length* s = min over layers, so it
moves only after the last layer of a forward has appended. A chunk of T new tokens sits at positions
[s, s+T) and query i may see key j iff j <= s + i (True = may attend).
"""

from __future__ import annotations

import torch


def check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_dtype(dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch dtype, got {dtype!r}")


def check_kv_dtype(dtype, d_head: int) -> None:
    """A floating dtype, or torch.int8 for the q8_0 format (cache/q8_kv.py), which needs d_head a multiple of 32."""
    if dtype != torch.int8:
        check_dtype(dtype)
        return
    from .q8_kv import check_q8_head_dim

    check_q8_head_dim(d_head)


def offset_causal_mask(t_new: int, offset: int, device=None) -> torch.Tensor:
    """[t_new, offset + t_new] boolean: query i (at absolute position offset + i) sees keys j <= offset + i."""
    q = torch.arange(t_new, device=device)[:, None] + offset  # [T, 1]
    k = torch.arange(offset + t_new, device=device)[None, :]  # [1, S]
    return k <= q  # [T, S]


class LayerFill:
    def __init__(self, num_layers: int, max_len: int, device):
        self.num_layers, self.max_len, self.device = num_layers, max_len, torch.device(device)
        self._fill = [0] * num_layers

    def seq_len(self, layer: int | None = None) -> int:
        """Committed length (min over layers), or one layer's fill count."""
        if layer is None:
            return min(self._fill)
        self._check_layer(layer)
        return self._fill[layer]

    def positions(self, t_new: int) -> torch.Tensor:
        s = self.seq_len()
        return torch.arange(s, s + t_new, device=self.device)  # [T]

    def mask(self, t_new: int) -> torch.Tensor:
        return offset_causal_mask(t_new, self.seq_len(), self.device)  # [T, S + T]

    def truncate(self, n: int) -> None:
        """Roll every layer back to n positions; the next append overwrites from n."""
        s = self.seq_len()
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= s:
            raise ValueError(f"truncate length must be an integer in [0, {s}] (the committed length), got {n!r}")
        self._fill = [n] * self.num_layers

    def _check_layer(self, layer: int) -> None:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be in [0, {self.num_layers}), got {layer!r}")

    def _check_room(self, layer: int, t_new: int) -> int:
        """Validate an append of t_new positions to `layer`; return the write offset."""
        self._check_layer(layer)
        s = self._fill[layer]
        if s + t_new > self.max_len:
            raise ValueError(
                f"cache overflow: layer {layer} holds {s} positions, {t_new} more exceed max_len {self.max_len}"
            )
        return s
