"""BlockPool: ref counts, LRU eviction of cached blocks, chained keys confirmed by tokens."""

import pytest

from tinyllm.cache.block_pool import BlockPool, block_key


def test_allocate_release_and_counts():
    pool = BlockPool(4, 2)
    a, b = pool.allocate(), pool.allocate()
    assert pool.stats().used == 2 and pool.num_free == 2
    pool.acquire(a)
    pool.release(a)
    assert pool.stats().used == 2
    pool.release(a), pool.release(b)
    assert pool.stats().used == 0 and pool.num_free == 4
    with pytest.raises(ValueError, match="num_blocks"):
        BlockPool(0, 2)


def test_cached_blocks_survive_until_evicted_in_lru_order():
    pool = BlockPool(3, 2)
    a, b = pool.allocate(), pool.allocate()
    ka = pool.register(a, None, [1, 2])
    kb = pool.register(b, ka, [3, 4])
    pool.release(b)  # released first: least recently used
    pool.release(a)
    assert pool.stats().cached_free == 2
    assert pool.lookup(None, [1, 2]) == (a, ka)
    assert pool.lookup(ka, [3, 4]) == (b, kb)
    c = pool.allocate()  # the never-keyed block goes first
    assert c not in (a, b)
    d = pool.allocate()  # then the LRU cached block, b, loses its key
    assert d == b and pool.lookup(ka, [3, 4]) is None and pool.lookup(None, [1, 2]) == (a, ka)


def test_lookup_confirms_parent_and_tokens():
    pool = BlockPool(2, 2)
    a = pool.allocate()
    ka = pool.register(a, None, [1, 2])
    assert pool.lookup(None, [1, 3]) is None
    assert pool.lookup(b"other", [1, 2]) is None
    # A forged entry under the right digest but the wrong tokens (a collision) is refused.
    pool.meta[block_key(None, [9, 9])] = (a, None, (1, 2))
    assert pool.lookup(None, [9, 9]) is None
    assert block_key(ka, [3]) != block_key(None, [3])


def test_forget_drops_the_key():
    pool = BlockPool(2, 2)
    a = pool.allocate()
    pool.register(a, None, [5, 6])
    pool.forget(a)
    assert pool.lookup(None, [5, 6]) is None
