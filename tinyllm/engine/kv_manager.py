"""KVManager: each request's block table over the shared BlockPool, prefix-cache hits, and slot numbers.

Terms: a request's block table lists the blocks holding its positions in order; `num_computed` positions
of it hold valid KV. Full blocks whose KV is computed are registered in the pool under a chained key, so a
later prompt with the same prefix reuses them (`match_prefix`). The manager touches no tensors: copies a
write into a shared block would need are returned as (src, dst) pairs for the runner to perform.
"""
from __future__ import annotations

from ..cache.block_pool import BlockPool
from .request import Request


def blocks_for(num_positions: int, block_size: int) -> int:
    return -(-num_positions // block_size)


class KVManager:
    def __init__(self, pool: BlockPool, enable_prefix_caching: bool = True):
        self.pool, self.block_size = pool, pool.block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.tables: dict[str, list[int]] = {}
        self.keys: dict[str, list[bytes]] = {}  # keys of the request's registered (full, computed) blocks

    def match_prefix(self, req: Request) -> int:
        """Take the cached blocks of the request's leading full blocks; return how many tokens they hold.
        At least the last token of the sequence is always left to compute (its logits are needed)."""
        table, keys = self.tables.setdefault(req.request_id, []), self.keys.setdefault(req.request_id, [])
        assert not table, "prefix matching happens before any block is allocated"
        if not self.enable_prefix_caching:
            return 0
        parent = None
        for i in range((req.num_tokens - 1) // self.block_size):
            hit = self.pool.lookup(parent, req.tokens(i * self.block_size, (i + 1) * self.block_size))
            if hit is None:
                break
            self.pool.acquire(hit[0])
            table.append(hit[0])
            keys.append(hit[1])
            parent = hit[1]
        return len(table) * self.block_size

    def blocks_needed(self, req: Request, num_new: int) -> int:
        table = self.tables.get(req.request_id, [])
        return max(0, blocks_for(req.num_computed + num_new, self.block_size) - len(table)) + \
            self._num_shared_write_blocks(req, num_new)

    def _num_shared_write_blocks(self, req: Request, num_new: int) -> int:
        table = self.tables.get(req.request_id, [])
        first = req.num_computed // self.block_size
        last = min(len(table), blocks_for(req.num_computed + num_new, self.block_size))
        return sum(1 for i in range(first, last) if self.pool.is_shared(table[i]))

    def allocate(self, req: Request, num_new: int) -> list[tuple[int, int]] | None:
        """Blocks for positions [num_computed, num_computed + num_new); None (nothing changed) if too few
        are free. Returns the block copies a write into shared blocks needs (copy-on-write)."""
        if self.blocks_needed(req, num_new) > self.pool.num_free:
            return None
        table = self.tables.setdefault(req.request_id, [])
        self.keys.setdefault(req.request_id, [])
        copies = []
        first = req.num_computed // self.block_size
        for i in range(first, min(len(table), blocks_for(req.num_computed + num_new, self.block_size))):
            if self.pool.is_shared(table[i]):
                fresh = self.pool.allocate()
                copies.append((table[i], fresh))
                self.pool.release(table[i])
                table[i] = fresh
            else:
                self.pool.forget(table[i])  # about to change: no longer a cached prefix
            del self.keys[req.request_id][i:]
        while len(table) < blocks_for(req.num_computed + num_new, self.block_size):
            table.append(self.pool.allocate())
        return copies

    def commit(self, req: Request) -> None:
        """Register every newly full, computed block under its chained key."""
        if not self.enable_prefix_caching:
            return
        table, keys = self.tables[req.request_id], self.keys[req.request_id]
        while len(keys) < req.num_computed // self.block_size:
            i = len(keys)
            parent = keys[-1] if keys else None
            keys.append(self.pool.register(table[i], parent, req.tokens(i * self.block_size, (i + 1) * self.block_size)))

    def truncate(self, req: Request, num_positions: int) -> None:
        """Keep blocks for the first num_positions positions, release the rest (rollback)."""
        table = self.tables.get(req.request_id, [])
        keep = blocks_for(num_positions, self.block_size)
        for block in reversed(table[keep:]):
            self.pool.release(block)
        del table[keep:]
        del self.keys.get(req.request_id, [])[num_positions // self.block_size:]

    def free(self, req: Request) -> None:
        """Release all of a request's blocks, tail first, so its prefix blocks stay cached longest."""
        for block in reversed(self.tables.pop(req.request_id, [])):
            self.pool.release(block)
        self.keys.pop(req.request_id, None)

    def slots(self, req: Request, start: int, stop: int) -> list[int]:
        table, P = self.tables[req.request_id], self.block_size
        return [table[p // P] * P + p % P for p in range(start, stop)]
