"""BlockPool: which KV blocks are free, who holds them, and which blocks hold a known prefix.

Terms:
- block: P consecutive positions of one sequence's keys and values (in every layer); a block id indexes
  the storage pool.
- ref count: how many sequences' block tables hold the block. 0 = free.
- key: for a *full* block, a digest of (parent block's key, the block's token ids), so one key names a
  whole prefix. A free block keeps its key (its KV is still valid) until it is handed out again.
- tail: a *partial* block a finished sequence left (its first n < P positions computed), recorded under its
  parent's key with its n tokens. Keys name whole blocks only; a prompt that continues a cached prefix part of
  the way into a block finds the block (full or tail) by `longest_child`: the positions up to the first token
  that differs are valid KV for it, since a position's KV depends on the tokens up to it alone.
- free list: ref-0 blocks in eviction order. Blocks with no key or tail go to the front (nothing to lose),
  the others to the back when released, so the least recently used cached prefix is evicted first.
- open block: free with nothing cached. A sequence grows into the block after its last one where that is
  open; a sequence that cannot (its first block, or the next one taken) starts a new run in the middle of the
  longest run of open blocks, so that the sequences running at once each have room to grow block after block.
  A CPU reads a sequence's keys and values fastest where its blocks are consecutive: each layer's part of a
  run is one stream for the hardware prefetcher instead of one stream a block (docs/benchmarks-history.md).

    lookup(key, parent, tokens) --hit--> acquire(block)      release(block) --ref 0--> free list
    allocate() <-- the block after the sequence's last, else the middle of the longest open run, else the
                   front of the free list (evicts its key)
A hit is confirmed by the stored parent key and token ids, so a digest collision never serves wrong KV.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

import numpy as np

CHILDREN_SCANNED = 16  # blocks under one (parent, first token) compared by longest_child, the latest first


@dataclass
class PoolStats:
    total: int
    used: int  # held by at least one sequence
    cached_free: int  # free, but still keyed or a tail: a future prompt may reuse them


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
        self.open = np.ones(num_blocks, dtype=bool)  # free with nothing cached (see the module's docstring)
        self.key_of: dict[int, bytes] = {}
        self.meta: dict[bytes, tuple[int, bytes | None, tuple[int, ...]]] = {}  # key -> (block, parent, tokens)
        self.tail_of: dict[int, tuple[bytes | None, tuple[int, ...]]] = {}  # block -> (parent, its n < P tokens)
        # (parent key, first token) -> the full and tail blocks cached under it, oldest first
        self.children: dict[tuple[bytes | None, int], OrderedDict[int, None]] = {}

    @property
    def num_free(self) -> int:
        return len(self.free)

    def stats(self) -> PoolStats:
        cached = sum(1 for b in self.free if b in self.key_of or b in self.tail_of)
        return PoolStats(self.num_blocks, self.num_blocks - len(self.free), cached)

    def allocate(self, prefer: int | None = None) -> int:
        """A fresh block (ref 1): `prefer` if it is free (it continues a sequence's run of consecutive blocks),
        else the middle of the longest run of open blocks, else (every free block caches something) the least
        recently used free one, whose cached prefix is evicted."""
        if not self.free:
            raise RuntimeError("no free KV blocks")  # callers check num_free first
        block = prefer if prefer is not None and prefer in self.free else self._roomiest()
        if block is None:
            block, _ = self.free.popitem(last=False)
        else:
            del self.free[block]
        self.forget(block)
        self.ref[block] = 1
        self.open[block] = False
        return block

    def _roomiest(self) -> int | None:
        """The middle of the longest run of consecutive open blocks (the first such run), or None."""
        edges = np.flatnonzero(np.diff(self.open, prepend=False, append=False))  # run i: [edges[2i], edges[2i+1])
        if len(edges) == 0:
            return None
        starts, ends = edges[0::2], edges[1::2]
        i = int(np.argmax(ends - starts))
        return int(starts[i] + (ends[i] - starts[i]) // 2)

    def acquire(self, block: int) -> None:
        if self.ref[block] == 0:
            del self.free[block]
            self.open[block] = False
        self.ref[block] += 1

    def release(self, block: int) -> None:
        assert self.ref[block] > 0, f"block {block} released more often than acquired"
        self.ref[block] -= 1
        if self.ref[block] == 0:
            self.free[block] = None
            if block not in self.key_of and block not in self.tail_of:
                self.free.move_to_end(block, last=False)  # nothing cached in it: hand it out first
                self.open[block] = True

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
            self.open[block] = False
            self.tail_of.pop(block, None)  # a tail that filled up is a full block now
            self.meta[key] = (block, parent, tuple(tokens))
            self.key_of[block] = key
            self._link(block, parent, tokens)
        return key

    def register_tail(self, block: int, parent: bytes | None, tokens: Sequence[int]) -> None:
        """Record that a partial block holds the KV of `tokens` (1 <= n < P of them) after the prefix `parent`.
        A block already recorded, full or tail, is left as it is."""
        assert 0 < len(tokens) < self.block_size, f"a tail holds 1..{self.block_size - 1} tokens, got {len(tokens)}"
        if block in self.key_of or block in self.tail_of:
            return
        self.open[block] = False
        self.tail_of[block] = (parent, tuple(tokens))
        self._link(block, parent, tokens)

    def longest_child(self, parent: bytes | None, tokens: Sequence[int]) -> tuple[int, int] | None:
        """The cached block (full or tail) after the prefix `parent` whose tokens agree longest with `tokens`
        from the first, and how many agree (>= 1); None when no block starts with tokens[0]."""
        if not tokens:
            return None
        under = self.children.get((parent, int(tokens[0])))
        best = None
        for block in islice(reversed(under or {}), CHILDREN_SCANNED):
            cached = self.tail_of[block][1] if block in self.tail_of else self.meta[self.key_of[block]][2]
            n = 0
            for a, b in zip(cached, tokens):
                if a != b:
                    break
                n += 1
            if best is None or n > best[1]:
                best = (block, n)
        return best

    def _link(self, block: int, parent: bytes | None, tokens: Sequence[int]) -> None:
        self.children.setdefault((parent, int(tokens[0])), OrderedDict())[block] = None

    def _unlink(self, block: int, parent: bytes | None, tokens: Sequence[int]) -> None:
        where = (parent, int(tokens[0]))
        under = self.children.get(where)
        if under is not None:
            under.pop(block, None)
            if not under:
                del self.children[where]

    def is_shared(self, block: int) -> bool:
        return self.ref[block] > 1

    def forget(self, block: int) -> None:
        """Drop what a block is recorded to hold (its key, or its tail) before its contents change."""
        key = self.key_of.pop(block, None)
        if key is not None:
            _, parent, tokens = self.meta.pop(key)
            self._unlink(block, parent, tokens)
        tail = self.tail_of.pop(block, None)
        if tail is not None:
            self._unlink(block, *tail)
        self.open[block] = self.ref[block] == 0
