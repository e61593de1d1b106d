"""KVManager: each request's block table over the shared BlockPool, and prefix-cache hits.

Terms: a request's block table lists the blocks holding its positions in order; `num_computed` positions
of it hold valid KV. Full blocks whose KV is computed are registered in the pool under a chained key, so a
later prompt with the same prefix reuses them (`match_prefix`); a finished request's last, partial block is
recorded as a tail. A later prompt takes whole blocks while they match, then the cached block after them that
agrees longest with its next tokens, for as many positions as agree: the same prompt sent again computes one
token, not up to a block. The manager touches no tensors: copies a write into a shared block would need are
returned as (src, dst) pairs for the runner to perform.
"""

from __future__ import annotations

from ..cache.block_pool import BlockPool
from ..cache.block_table import BlockTable
from .request import Request


class KVManager:
    def __init__(self, pool: BlockPool, enable_prefix_caching: bool = True):
        self.pool, self.block_size = pool, pool.block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.tables: dict[str, BlockTable] = {}
        self.keys: dict[str, list[bytes]] = {}  # keys of the request's registered (full, computed) blocks

    def _table(self, req: Request) -> BlockTable:
        self.keys.setdefault(req.request_id, [])
        return self.tables.setdefault(req.request_id, BlockTable(self.pool))

    def match_prefix(self, req: Request) -> int:
        """Take the cached blocks of the request's leading full blocks, then the cached block after them that
        agrees longest with the tokens that follow; return how many positions they hold. At least the last
        token of the sequence is always left to compute (its logits are needed)."""
        table, keys = self._table(req), self.keys[req.request_id]
        assert not table.blocks, "prefix matching happens before any block is allocated"
        if not self.enable_prefix_caching or req.params.prompt_logprobs is not None:
            return 0  # prompt logprobs need the logits of every prompt position: compute them all
        parent = None
        for i in range((req.num_tokens - 1) // self.block_size):
            hit = self.pool.lookup(parent, req.tokens(i * self.block_size, (i + 1) * self.block_size))
            if hit is None:
                break
            self.pool.acquire(hit[0])
            table.blocks.append(hit[0])
            keys.append(hit[1])
            parent = hit[1]
        start = len(table) * self.block_size
        hit = self.pool.longest_child(parent, req.tokens(start, min(start + self.block_size, req.num_tokens - 1)))
        if hit is None:
            return start
        self.pool.acquire(hit[0])  # its positions from hit[1] on are this request's to write: copied or forgotten
        table.blocks.append(hit[0])
        return start + hit[1]

    def blocks_needed(self, req: Request, num_new: int) -> int:
        table = self.tables.get(req.request_id) or BlockTable(self.pool)
        return table.blocks_needed(req.num_computed, req.num_computed + num_new)

    def allocate(self, req: Request, num_new: int) -> list[tuple[int, int]] | None:
        """Blocks for positions [num_computed, num_computed + num_new); None (nothing changed) if too few
        are free. Returns the block copies a write into shared blocks needs (copy-on-write)."""
        start = req.num_computed
        copies = self._table(req).reserve(start, start + num_new)
        if copies is not None:
            del self.keys[req.request_id][start // self.block_size :]  # blocks written from here on change
        return copies

    def commit(self, req: Request) -> None:
        """Register every newly full, computed block under its chained key."""
        if not self.enable_prefix_caching:
            return
        self._register_full(req, self.tables[req.request_id], self.keys[req.request_id], req.num_computed)

    def _register_full(self, req: Request, table: BlockTable, keys: list[bytes], num_positions: int) -> None:
        """Register the table's blocks wholly within the first num_positions positions that have no key yet."""
        P = self.block_size
        while len(keys) < min(num_positions // P, len(table)):
            i = len(keys)
            keys.append(self.pool.register(table.blocks[i], keys[-1] if keys else None, req.tokens(i * P, (i + 1) * P)))

    def truncate(self, req: Request, num_positions: int) -> None:
        """Keep blocks for the first num_positions positions, release the rest (rollback)."""
        table = self.tables.get(req.request_id)
        if table is not None:
            table.truncate(num_positions)
        del self.keys.get(req.request_id, [])[num_positions // self.block_size :]

    def free(self, req: Request) -> None:
        """Release all of a request's blocks, tail first, so its prefix blocks stay cached longest. First the
        blocks its last step filled are registered (no commit follows a request's last step) and a partial
        last block is recorded as a tail."""
        table = self.tables.pop(req.request_id, None)
        keys = self.keys.pop(req.request_id, None)
        if table is not None:
            if self.enable_prefix_caching:
                self._record(req, table, keys or [])
            table.release()

    def _record(self, req: Request, table: BlockTable, keys: list[bytes]) -> None:
        # Positions whose KV is of the request's committed tokens: a verification step that ended the request
        # computed drafts past its last accepted one (and the last sampled token is never computed).
        P = self.block_size
        valid = max(0, min(req.num_computed, req.num_committed - 1))
        self._register_full(req, table, keys, valid)
        i, n = divmod(valid, P)
        if n and i < len(table) and i == len(keys):
            self.pool.register_tail(table.blocks[i], keys[-1] if keys else None, req.tokens(i * P, valid))
