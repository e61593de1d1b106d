"""LatentCache: MLA's compressed KV latent [B, T, r] and shared rope key [B, T, dR] per position."""

from __future__ import annotations

import torch

from .fill import LayerFill, check_dtype, check_positive


class LatentCache(LayerFill):
    """Storage [L, B, max_len, r] for the latent c and [L, B, max_len, dR] for the rope key k_R, with the
    same fill, commit, mask and rollback rules as KVCache."""

    def __init__(
        self,
        n_layers: int,
        d_latent: int,
        d_rope: int,
        max_len: int,
        batch: int = 1,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ):
        check_positive(n_layers=n_layers, d_latent=d_latent, d_rope=d_rope, max_len=max_len, batch=batch)
        check_dtype(dtype)
        super().__init__(n_layers, max_len, device)
        self.batch, self.d_latent, self.d_rope, self.dtype = batch, d_latent, d_rope, dtype
        self.c = torch.zeros(n_layers, batch, max_len, d_latent, dtype=dtype, device=self.device)  # [L, B, max_len, r]
        self.k_rope = torch.zeros(
            n_layers, batch, max_len, d_rope, dtype=dtype, device=self.device
        )  # [L, B, max_len, dR]

    def update(self, layer: int, c_new: torch.Tensor, k_rope_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """c_new [B, T, r], k_rope_new [B, T, dR] -> (c_all [B, s+T, r], k_rope_all [B, s+T, dR])."""
        if c_new.dim() != 3 or tuple(c_new.shape[::2]) != (self.batch, self.d_latent):
            raise ValueError(f"c_new must have shape [B={self.batch}, T, r={self.d_latent}], got {list(c_new.shape)}")
        if k_rope_new.dim() != 3 or tuple(k_rope_new.shape) != (self.batch, c_new.shape[1], self.d_rope):
            raise ValueError(
                f"k_rope_new must have shape [B={self.batch}, T={c_new.shape[1]}, "
                f"dR={self.d_rope}], got {list(k_rope_new.shape)}"
            )
        t_new = c_new.shape[1]
        s = self._check_room(layer, t_new)
        self.c[layer, :, s : s + t_new] = c_new
        self.k_rope[layer, :, s : s + t_new] = k_rope_new
        self._fill[layer] = s + t_new
        return self.c[layer, :, : s + t_new].to(c_new.dtype), self.k_rope[layer, :, : s + t_new].to(k_rope_new.dtype)

    def nbytes(self) -> int:
        """L · B · max_len · (r + dR) · itemsize."""
        return self.c.numel() * self.c.element_size() + self.k_rope.numel() * self.k_rope.element_size()
