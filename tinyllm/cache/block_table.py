"""BlockTable: one sequence's blocks in a BlockPool, in position order; the one place that allocates,
copies on write, truncates and numbers slots (under both the paged cache and the engine's KV manager).

Terms: P = block size. Position p lives in block blocks[p // P] at offset p % P; its *slot* (row in the
paged storage) is blocks[p // P] * P + p % P. A block held by more than one table is *shared* and never
written: `reserve` swaps it for a fresh copy first and returns the (src, dst) pair for whoever owns the
tensors to copy.

    blocks = [7, 2, 9]      positions 0..15 -> block 7, 16..31 -> block 2, 32..47 -> block 9
"""

from __future__ import annotations

import torch

from .block_pool import BlockPool


def blocks_for(num_positions: int, block_size: int) -> int:
    """Blocks that hold num_positions positions (ceiling division)."""
    return -(-num_positions // block_size)


class BlockTable:
    def __init__(self, pool: BlockPool, blocks: list[int] | None = None):
        self.pool, self.block_size = pool, pool.block_size
        self.blocks: list[int] = list(blocks or [])

    def __len__(self) -> int:
        return len(self.blocks)

    def _written(self, start: int, stop: int) -> range:
        """Indices of existing blocks that a write of positions [start, stop) touches."""
        return range(start // self.block_size, min(len(self.blocks), blocks_for(stop, self.block_size)))

    def blocks_needed(self, start: int, stop: int) -> int:
        """Free blocks a write of positions [start, stop) takes: missing ones plus copies of shared ones."""
        missing = max(0, blocks_for(stop, self.block_size) - len(self.blocks))
        return missing + sum(1 for i in self._written(start, stop) if self.pool.is_shared(self.blocks[i]))

    def reserve(self, start: int, stop: int) -> list[tuple[int, int]] | None:
        """Make the blocks for positions [start, stop) exclusively this table's: copy shared ones, allocate
        missing ones. Returns the (src, dst) block copies to perform, or None (nothing changed) when the
        pool has too few free blocks."""
        if self.blocks_needed(start, stop) > self.pool.num_free:
            return None
        copies = []
        for i in self._written(start, stop):
            if self.pool.is_shared(self.blocks[i]):
                fresh = self.pool.allocate()
                copies.append((self.blocks[i], fresh))
                self.pool.release(self.blocks[i])
                self.blocks[i] = fresh
            else:
                self.pool.forget(self.blocks[i])  # its contents change: it no longer names a cached prefix
        while len(self.blocks) < blocks_for(stop, self.block_size):
            self.blocks.append(self.pool.allocate(prefer=self.blocks[-1] + 1 if self.blocks else None))
        return copies

    def truncate(self, num_positions: int) -> None:
        """Keep the blocks of the first num_positions positions; release the rest, tail first (so a
        prefix's earlier blocks stay cached longest). A kept shared block stays untouched."""
        keep = blocks_for(num_positions, self.block_size)
        for block in reversed(self.blocks[keep:]):
            self.pool.release(block)
        del self.blocks[keep:]

    def release(self) -> None:
        self.truncate(0)

    def slot_range(self, stop: int) -> slice | None:
        """Slots of positions [0, stop) as one slice when their blocks are consecutive in the pool (the pool
        grows a sequence block after block where it can), so attention can read them in place instead of
        gathering; else None."""
        n = blocks_for(stop, self.block_size)
        first = self.blocks[0] if self.blocks else 0
        if self.blocks[:n] != list(range(first, first + n)):
            return None
        return slice(first * self.block_size, first * self.block_size + stop)

    def slots(self, start: int, stop: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Slot numbers of positions [start, stop) -> [stop - start] int64."""
        P = self.block_size
        blocks = torch.tensor(self.blocks[: blocks_for(stop, P)], dtype=torch.long)  # [nb]
        slots = (blocks[:, None] * P + torch.arange(P)).reshape(-1)[start:stop]  # [stop - start]
        return slots.to(device)
