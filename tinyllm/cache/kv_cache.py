"""KVCache: preallocated per-layer keys and values for grouped-query attention."""

from __future__ import annotations

import torch

from .fill import LayerFill, check_kv_dtype, check_positive
from .q8_kv import Q8_BLOCK, bytes_per_value, dequantize, is_q8, quantize


class KVCache(LayerFill):
    """Storage [L, B, Hkv, max_len, D] for K and V. `update` writes a chunk at the layer's fill count and
    returns everything that layer stores, as stored (a float16 cache hands back float16-rounded values,
    the new chunk included), converted to the compute dtype of the chunk. A q8_0 cache (dtype torch.int8)
    keeps int8 values and float16 scales k_scale, v_scale [L, B, Hkv, max_len, D/32] and hands back q * d."""

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        d_head: int,
        max_len: int,
        batch: int = 1,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ):
        check_positive(n_layers=n_layers, n_kv_heads=n_kv_heads, d_head=d_head, max_len=max_len, batch=batch)
        check_kv_dtype(dtype, d_head)
        super().__init__(n_layers, max_len, device)
        self.batch, self.n_kv_heads, self.d_head, self.dtype = batch, n_kv_heads, d_head, dtype
        shape = (n_layers, batch, n_kv_heads, max_len, d_head)  # [L, B, Hkv, max_len, D]
        self.k = torch.zeros(shape, dtype=dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=dtype, device=self.device)
        self.k_scale = self.v_scale = None
        if is_q8(dtype):
            scales = (*shape[:-1], d_head // Q8_BLOCK)  # [L, B, Hkv, max_len, D/32]
            self.k_scale = torch.zeros(scales, dtype=torch.float16, device=self.device)
            self.v_scale = torch.zeros(scales, dtype=torch.float16, device=self.device)

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k_new, v_new [B, Hkv, T, D] -> (k_all, v_all) [B, Hkv, s+T, D]."""
        expected = (self.batch, self.n_kv_heads, None, self.d_head)
        for name, t in (("k_new", k_new), ("v_new", v_new)):
            if t.dim() != 4 or any(e is not None and e != d for e, d in zip(expected, t.shape)):
                raise ValueError(
                    f"{name} must have shape [B={self.batch}, Hkv={self.n_kv_heads}, T, "
                    f"D={self.d_head}], got {list(t.shape)}"
                )
        if k_new.shape != v_new.shape:
            raise ValueError(f"k_new {list(k_new.shape)} and v_new {list(v_new.shape)} differ in shape")
        t_new = k_new.shape[2]
        s = self._check_room(layer, t_new)
        if is_q8(self.dtype):
            return self._update_q8(layer, s, k_new, v_new)
        k_layer, v_layer = self.k[layer], self.v[layer]  # [B, Hkv, max_len, D]
        k_layer.narrow(2, s, t_new).copy_(k_new)  # rounds to the storage dtype
        v_layer.narrow(2, s, t_new).copy_(v_new)
        self._fill[layer] = s + t_new
        k_all = k_layer.narrow(2, 0, s + t_new)  # [B, Hkv, s+T, D]
        v_all = v_layer.narrow(2, 0, s + t_new)  # [B, Hkv, s+T, D]
        return k_all.to(k_new.dtype), v_all.to(v_new.dtype)

    def _update_q8(self, layer: int, s: int, k_new: torch.Tensor, v_new: torch.Tensor):
        t_new, out = k_new.shape[2], []
        for new, cache, scale in ((k_new, self.k, self.k_scale), (v_new, self.v, self.v_scale)):
            q, d = quantize(new)
            cache[layer].narrow(2, s, t_new).copy_(q)
            scale[layer].narrow(2, s, t_new).copy_(d)
            stored = cache[layer].narrow(2, 0, s + t_new), scale[layer].narrow(2, 0, s + t_new)
            out.append(dequantize(*stored, new.dtype))
        self._fill[layer] = s + t_new
        return out[0], out[1]

    def nbytes(self) -> int:
        """2 · L · B · Hkv · max_len · D · bytes a value (its scale's share included)."""
        return int(2 * self.k.numel() * bytes_per_value(self.dtype))
