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


def test_tails_and_full_blocks_are_found_by_their_longest_agreement():
    pool = BlockPool(4, 4)
    a, b, c = pool.allocate(), pool.allocate(), pool.allocate()
    ka = pool.register(a, None, [1, 2, 3, 4])
    pool.register(b, ka, [5, 6, 7, 8])  # full
    pool.register_tail(c, ka, [5, 6, 9])  # partial
    assert pool.longest_child(ka, [5, 6, 7]) == (b, 3)
    assert pool.longest_child(ka, [5, 6, 9, 1]) == (c, 3)
    assert pool.longest_child(ka, [5, 0]) in ((b, 1), (c, 1))
    assert pool.longest_child(ka, [6]) is None and pool.longest_child(None, [5]) is None
    assert pool.longest_child(ka, []) is None
    assert pool.longest_child(None, [1, 2, 9]) == (a, 2)
    for block in (a, b, c):
        pool.release(block)
    assert pool.stats().cached_free == 3
    with pytest.raises(AssertionError, match="a tail holds 1..3 tokens"):
        pool.register_tail(pool.allocate(), None, [1, 2, 3, 4])


def test_a_tail_is_dropped_when_its_block_changes_or_is_handed_out():
    pool = BlockPool(2, 4)
    a, b = pool.allocate(), pool.allocate()
    pool.register_tail(a, None, [1, 2])
    pool.register_tail(a, None, [7])  # already recorded: kept as it was
    assert pool.tail_of[a] == (None, (1, 2))
    pool.forget(a)
    assert pool.longest_child(None, [1]) is None and not pool.tail_of and not pool.children
    pool.register_tail(b, None, [3])
    pool.release(b)  # free, still a tail: handed out after the never-recorded block
    pool.release(a)
    assert pool.allocate() == a and pool.longest_child(None, [3]) == (b, 1)
    assert pool.allocate() == b and pool.longest_child(None, [3]) is None and not pool.children


def test_a_tail_that_fills_up_becomes_a_full_block():
    pool = BlockPool(1, 2)
    a = pool.allocate()
    pool.register_tail(a, None, [1])
    key = pool.register(a, None, [1, 2])
    assert not pool.tail_of and pool.lookup(None, [1, 2]) == (a, key)
    assert pool.longest_child(None, [1, 5]) == (a, 1)


def test_open_blocks_stay_those_free_with_nothing_cached():
    """Under a random mix of allocations (fresh and continuing), shares, registrations and releases, the pool's
    open set is exactly its free blocks that cache nothing, and a fresh run never evicts a cached block while an
    open one is left."""
    import random

    rng = random.Random(0)
    pool = BlockPool(24, 2)
    held: list[int] = []
    for step in range(600):
        op = rng.random()
        if op < 0.45 and pool.num_free:
            open_before = {b for b in pool.free if b not in pool.key_of and b not in pool.tail_of}
            prefer = rng.choice(held) + 1 if held and rng.random() < 0.5 else None
            b = pool.allocate(prefer=prefer if prefer is None or prefer < pool.num_blocks else None)
            if open_before and b != prefer:
                assert b in open_before  # a cached block is evicted only when no open block is left
            held.append(b)
        elif op < 0.6 and held:
            b = rng.choice(held)
            if b not in pool.key_of:
                pool.register(b, None, [step, rng.randrange(1000)])
        elif op < 0.7 and held:
            b = rng.choice(held)
            if b not in pool.key_of and b not in pool.tail_of:
                pool.register_tail(b, None, [step])
        elif op < 0.75 and held:
            b = rng.choice(held)
            pool.acquire(b)
            held.append(b)
        elif held:
            pool.release(held.pop(rng.randrange(len(held))))
        expect = [pool.ref[b] == 0 and b not in pool.key_of and b not in pool.tail_of for b in range(pool.num_blocks)]
        assert pool.open.tolist() == expect
