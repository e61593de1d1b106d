"""BlockPool: which KV blocks are free, who holds them, and which full blocks hold a known prefix.

Terms:
- block: P consecutive positions of one sequence's keys and values (in every layer); a block id indexes
  the storage pool.
- ref count: how many sequences' block tables hold the block. 0 = free.
- key: for a *full* block, a digest of (parent block's key, the block's token ids), so one key names a
  whole prefix. A free block keeps its key (its KV is still valid) until it is handed out again.
- free list: ref-0 blocks in eviction order. Unkeyed blocks go to the front (nothing to lose), keyed
  blocks to the back when released, so the least recently used cached prefix is evicted first.

    lookup(key, parent, tokens) --hit--> acquire(block)      release(block) --ref 0--> free list
                                                              allocate() <-- front of free list (evicts key)
A hit is confirmed by the stored parent key and token ids, so a digest collision never serves wrong KV.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class PoolStats:
    total: int
    used: int  # held by at least one sequence
    cached_free: int  # free, but still keyed: a future prompt may reuse them


def block_key(parent: bytes | None, tokens: Sequence[int]) -> bytes:
    """Digest naming the prefix that ends with this block: chained through the parent's key."""
    h = hashlib.blake2b(digest_size=16)
    h.update(parent or b"root")
    h.update(b"".join(int(t).to_bytes(4, "little", signed=False) for t in tokens))
    return h.digest()


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int):
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"num_blocks must be a positive integer, got {num_blocks!r}")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.ref = [0] * num_blocks
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self.key_of: dict[int, bytes] = {}
        self.meta: dict[bytes, tuple[int, bytes | None, tuple[int, ...]]] = {}  # key -> (block, parent, tokens)

    @property
    def num_free(self) -> int:
        return len(self.free)

    def stats(self) -> PoolStats:
        cached = sum(1 for b in self.free if b in self.key_of)
        return PoolStats(self.num_blocks, self.num_blocks - len(self.free), cached)

    def allocate(self, prefer: int | None = None) -> int:
        """A fresh block (ref 1): `prefer` if it is free (it continues a sequence's run of consecutive blocks,
        which attention reads in place instead of gathering), else the least recently used free one. A cached
        prefix in the block handed out is evicted."""
        if not self.free:
            raise RuntimeError("no free KV blocks")  # callers check num_free first
        if prefer is not None and prefer in self.free:
            del self.free[prefer]
            block = prefer
        else:
            block, _ = self.free.popitem(last=False)
        key = self.key_of.pop(block, None)
        if key is not None:
            del self.meta[key]
        self.ref[block] = 1
        return block

    def acquire(self, block: int) -> None:
        if self.ref[block] == 0:
            del self.free[block]
        self.ref[block] += 1

    def release(self, block: int) -> None:
        assert self.ref[block] > 0, f"block {block} released more often than acquired"
        self.ref[block] -= 1
        if self.ref[block] == 0:
            self.free[block] = None
            if block not in self.key_of:
                self.free.move_to_end(block, last=False)  # nothing cached in it: hand it out first

    def lookup(self, parent: bytes | None, tokens: Sequence[int]) -> tuple[int, bytes] | None:
        """The block caching exactly (parent prefix, tokens), confirmed token by token, and its key."""
        key = block_key(parent, tokens)
        hit = self.meta.get(key)
        if hit is None or hit[1] != parent or hit[2] != tuple(tokens):
            return None
        return hit[0], key

    def register(self, block: int, parent: bytes | None, tokens: Sequence[int]) -> bytes:
        """Record that a full block holds (parent prefix, tokens); returns its key. An existing entry for
        the same prefix is kept (this block then stays unkeyed and is freed first)."""
        key = block_key(parent, tokens)
        if key not in self.meta and block not in self.key_of:
            self.meta[key] = (block, parent, tuple(tokens))
            self.key_of[block] = key
        return key

    def is_shared(self, block: int) -> bool:
        return self.ref[block] > 1

    def forget(self, block: int) -> None:
        """Drop a block's key before its contents change (a write after a rollback into it)."""
        key = self.key_of.pop(block, None)
        if key is not None:
            del self.meta[key]
