"""Paged KV storage: one preallocated pool of fixed-size blocks per layer, and a sequence's view of it.

Terms: P = block_size positions per block, N blocks. Position p of a sequence lives in block
block_table[p // P] at offset p % P; its *slot* is block * P + p % P. Storage is [L, N*P, Hkv, D], so a
slot indexes all heads of one position.

    block_table = [7, 2, 9]      positions 0..15 -> block 7, 16..31 -> block 2, 32..47 -> block 9

`PagedKVCache` honours the KVCache contract for one sequence (seq_len, update, positions, mask, truncate,
nbytes); blocks come from a BlockPool, so several sequences can share one storage and its prefix blocks.
A shared block is never written: the first write into it copies it (copy-on-write).
"""

from __future__ import annotations

import numpy as np
import torch

from .block_pool import BlockPool
from .block_table import BlockTable, blocks_for
from .fill import LayerFill, check_kv_dtype, check_positive
from .q8_kv import Q8_BLOCK, bytes_per_value, dequantize, is_q8, quantize


def lazy_zeros(shape: tuple[int, ...], dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """Zeros whose pages the OS maps on first write (calloc, through numpy) on the CPU, so a large pool
    costs resident memory only as it fills; torch.zeros elsewhere."""
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    raw = torch.from_numpy(np.zeros(shape, dtype=f"u{itemsize}"))  # calloc: untouched pages read as zero
    return raw.view(dtype)


class PagedStorage:
    """The tensors: keys and values for every slot of every layer, lazily mapped zeros unless `resident`
    (every page written at creation). A q8_0 storage (dtype torch.int8, cache/q8_kv.py) holds int8 keys and
    values and their float16 scales, k_scale and v_scale [L, N*P, Hkv, D/32]; a float one has no scales."""

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        d_head: int,
        num_blocks: int,
        block_size: int = 16,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        resident: bool = False,
    ):
        check_positive(
            n_layers=n_layers, n_kv_heads=n_kv_heads, d_head=d_head, num_blocks=num_blocks, block_size=block_size
        )
        check_kv_dtype(dtype, d_head)
        self.n_layers, self.n_kv_heads, self.d_head = n_layers, n_kv_heads, d_head
        self.num_blocks, self.block_size, self.dtype = num_blocks, block_size, dtype
        shape = (n_layers, num_blocks * block_size, n_kv_heads, d_head)  # [L, N*P, Hkv, D]
        self.k = lazy_zeros(shape, dtype, device)
        self.v = lazy_zeros(shape, dtype, device)
        self.k_scale = self.v_scale = None
        if is_q8(dtype):
            scales = (*shape[:-1], d_head // Q8_BLOCK)  # [L, N*P, Hkv, D/32]
            self.k_scale = lazy_zeros(scales, torch.float16, device)
            self.v_scale = lazy_zeros(scales, torch.float16, device)
        # resident: every page written now (a server pays it at start-up), not on a sequence's first write,
        # where faulting in fresh pages stalls the step that runs every stream
        self.resident = resident
        if resident:
            self.prefault()

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor of the storage, each [L, N*P, ...]: keys and values, then their scales if any."""
        return [t for t in (self.k, self.v, self.k_scale, self.v_scale) if t is not None]

    @property
    def device(self) -> torch.device:
        return self.k.device

    def prefault(self) -> None:
        """Write every page of a fresh pool once (zeros, what it reads as already: every slot is zeroed), so
        that no later write faults."""
        for t in self.tensors():
            t.zero_()

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def copy_block(self, src: int, dst: int) -> None:
        P = self.block_size
        for t in self.tensors():
            t[:, dst * P : (dst + 1) * P] = t[:, src * P : (src + 1) * P]

    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's keys and values as [N*P, Hkv*D]: a slot is one row, so index_select gathers rows."""
        shape = (self.num_blocks * self.block_size, self.n_kv_heads * self.d_head)
        return self.k[layer].view(shape), self.v[layer].view(shape)

    def write(self, layer: int, slots: torch.Tensor | slice, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v [T, Hkv, D] into slots [T] (or a slice of T consecutive slots) of one layer (rounded to the
        storage dtype, or quantized to q8_0)."""
        if is_q8(self.dtype):
            for values, cache, scale in ((k, self.k, self.k_scale), (v, self.v, self.v_scale)):
                q, d = quantize(values)
                if isinstance(slots, slice):
                    cache[layer, slots], scale[layer, slots] = q, d
                else:
                    cache[layer].index_copy_(0, slots, q)
                    scale[layer].index_copy_(0, slots, d)
            return
        if isinstance(slots, slice):
            self.k[layer, slots] = k
            self.v[layer, slots] = v
            return
        k_flat, v_flat = self.flat(layer)
        row = self.n_kv_heads * self.d_head
        k_flat.index_copy_(0, slots, k.reshape(k.shape[0], row).to(self.dtype))
        v_flat.index_copy_(0, slots, v.reshape(v.shape[0], row).to(self.dtype))

    def gather(self, layer: int, slots: torch.Tensor | slice, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values at slots [..., S] -> [..., S, Hkv, D] in the compute dtype; a slice of consecutive
        slots is read in place (a view, no copy, when the dtypes match) -> [S, Hkv, D]."""
        if is_q8(self.dtype):
            out = []
            for cache, scale in ((self.k, self.k_scale), (self.v, self.v_scale)):
                if isinstance(slots, slice):
                    q, d = cache[layer, slots], scale[layer, slots]
                else:
                    index = slots.reshape(-1)
                    q, d = cache[layer].index_select(0, index), scale[layer].index_select(0, index)
                    q = q.view(*slots.shape, self.n_kv_heads, self.d_head)
                    d = d.view(*slots.shape, self.n_kv_heads, self.d_head // Q8_BLOCK)
                out.append(dequantize(q, d, dtype))
            return out[0], out[1]
        if isinstance(slots, slice):
            k, v = self.k[layer, slots], self.v[layer, slots]  # [S, Hkv, D]
            return k.to(dtype), v.to(dtype)
        k_flat, v_flat = self.flat(layer)
        shape = (*slots.shape, self.n_kv_heads, self.d_head)
        index = slots.reshape(-1)
        return k_flat.index_select(0, index).view(shape).to(dtype), v_flat.index_select(0, index).view(shape).to(dtype)


class PagedKVCache(LayerFill):
    """One sequence (batch 1) stored in blocks of a shared PagedStorage, allocated from a BlockPool."""

    def __init__(
        self,
        storage: PagedStorage,
        pool: BlockPool,
        max_len: int,
        block_table: list[int] | None = None,
        num_cached: int = 0,
    ):
        check_positive(max_len=max_len)
        super().__init__(storage.n_layers, max_len, storage.device)
        self.storage, self.pool = storage, pool
        self.table = BlockTable(pool, block_table)
        self._fill = [num_cached] * storage.n_layers
        self.batch, self.n_kv_heads, self.d_head, self.dtype = 1, storage.n_kv_heads, storage.d_head, storage.dtype

    @classmethod
    def for_one_sequence(
        cls,
        n_layers: int,
        n_kv_heads: int,
        d_head: int,
        max_len: int,
        block_size: int = 16,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> PagedKVCache:
        num_blocks = blocks_for(max_len, block_size)
        storage = PagedStorage(n_layers, n_kv_heads, d_head, num_blocks, block_size, dtype, device)
        return cls(storage, BlockPool(num_blocks, block_size), max_len)

    @property
    def block_table(self) -> list[int]:
        return self.table.blocks

    def slots(self, start: int, stop: int) -> torch.Tensor:
        return self.table.slots(start, stop, self.device)  # [stop - start]

    def prepare_write(self, start: int, stop: int) -> None:
        """Make blocks for positions [start, stop) exclusively ours: allocate missing, copy shared ones.
        Runs once per forward (on the first layer); raises before changing anything if blocks run out."""
        copies = self.table.reserve(start, stop)
        if copies is None:
            raise ValueError(
                f"out of KV blocks: positions [{start}, {stop}) need "
                f"{self.table.blocks_needed(start, stop)} blocks, {self.pool.num_free} are free"
            )
        for src, dst in copies:
            self.storage.copy_block(src, dst)

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k_new, v_new [1, Hkv, T, D] -> (k_all, v_all) [1, Hkv, s+T, D], as stored."""
        expected = (1, self.n_kv_heads, self.d_head)
        if (
            k_new.dim() != 4
            or (k_new.shape[0], k_new.shape[1], k_new.shape[3]) != expected
            or k_new.shape != v_new.shape
        ):
            raise ValueError(
                f"k_new and v_new must both have shape [B=1, Hkv={self.n_kv_heads}, T, D={self.d_head}], "
                f"got {list(k_new.shape)} and {list(v_new.shape)}"
            )
        t_new = k_new.shape[2]
        s = self._check_room(layer, t_new)
        if s + t_new > len(self.block_table) * self.storage.block_size or layer == 0:
            self.prepare_write(s, s + t_new)
        self.storage.write(layer, self.slots(s, s + t_new), k_new[0].transpose(0, 1), v_new[0].transpose(0, 1))
        self._fill[layer] = s + t_new
        k_all, v_all = self.storage.gather(layer, self.slots(0, s + t_new), k_new.dtype)  # [S, Hkv, D]
        return k_all.transpose(0, 1)[None], v_all.transpose(0, 1)[None]  # [1, Hkv, S, D]

    def truncate(self, n: int) -> None:
        """Roll back to n positions and release whole blocks past n; a kept shared block stays untouched."""
        super().truncate(n)
        self.table.truncate(n)

    def release(self) -> None:
        """Give every block back to the pool."""
        self.truncate(0)

    def nbytes(self) -> int:
        """Bytes of the storage this sequence can address: its blocks, 2 · L · blocks · P · Hkv · D · bytes a
        value (its scale's share included)."""
        values = 2 * self.storage.n_layers * self.n_kv_heads * self.d_head * len(self.block_table)
        return int(values * self.storage.block_size * bytes_per_value(self.storage.dtype))
