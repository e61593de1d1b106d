"""BlockTable: reserve (allocate + copy-on-write pairs), truncate, slots, and the in-place slot range."""

import torch

from tinyllm.cache.block_pool import BlockPool
from tinyllm.cache.block_table import BlockTable, blocks_for


def test_blocks_for_is_a_ceiling_division():
    assert [blocks_for(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_reserve_allocates_missing_blocks_and_numbers_slots():
    pool = BlockPool(8, 4)
    t = BlockTable(pool)
    assert t.reserve(0, 6) == [] and len(t) == 2
    expected = [t.blocks[p // 4] * 4 + p % 4 for p in range(6)]
    assert t.slots(0, 6).tolist() == expected and t.slots(2, 5).tolist() == expected[2:5]


def test_reserve_copies_a_shared_block_before_writing_into_it():
    pool = BlockPool(8, 4)
    a = BlockTable(pool)
    a.reserve(0, 8)
    pool.acquire(a.blocks[1])
    b = BlockTable(pool, list(a.blocks))  # b shares both blocks (one extra reference on block 1 only here)
    pool.acquire(a.blocks[0])
    copies = b.reserve(5, 6)
    assert copies == [(a.blocks[1], b.blocks[1])] and b.blocks[1] != a.blocks[1] and b.blocks[0] == a.blocks[0]


def test_reserve_changes_nothing_when_the_pool_runs_out():
    pool = BlockPool(2, 4)
    t = BlockTable(pool)
    t.reserve(0, 8)
    assert t.reserve(8, 9) is None and len(t) == 2 and pool.num_free == 0


def test_truncate_releases_whole_blocks_tail_first():
    pool = BlockPool(8, 4)
    t = BlockTable(pool)
    t.reserve(0, 12)
    kept = t.blocks[:2]
    t.truncate(5)
    assert t.blocks == kept and pool.num_free == 6
    t.release()
    assert len(t) == 0 and pool.num_free == 8


def test_slot_range_only_for_consecutive_blocks():
    pool = BlockPool(8, 4)
    t = BlockTable(pool)
    t.reserve(0, 10)  # a fresh pool starts a sequence mid-pool and grows it block after block: 4, 5, 6
    first = t.blocks[0]
    assert t.blocks == [first, first + 1, first + 2]
    r = t.slot_range(10)
    assert isinstance(r, slice) and list(range(r.start, r.stop)) == t.slots(0, 10).tolist()
    t.blocks[1], t.blocks[2] = t.blocks[2], t.blocks[1]
    assert t.slot_range(10) is None and t.slot_range(4) == slice(4 * first, 4 * first + 4)
    assert torch.equal(t.slots(0, 4), torch.arange(4 * first, 4 * first + 4))


def test_a_table_grows_into_the_block_after_its_last_when_free():
    pool = BlockPool(8, 4)
    t, y, z = BlockTable(pool), BlockTable(pool), BlockTable(pool)
    t.reserve(0, 4)
    y.reserve(0, 4)
    z.reserve(0, 4)
    # each first block in the middle of the longest run of open blocks: [0, 8) -> 4, [0, 4) -> 2, [5, 8) -> 6
    assert (t.blocks, y.blocks, z.blocks) == ([4], [2], [6])
    y.release()
    z.release()
    t.reserve(4, 12)  # continues after block 4: 5, 6
    assert t.blocks == [4, 5, 6] and t.slot_range(12) == slice(16, 28)


def test_sequences_growing_together_stay_consecutive():
    """Tables growing a block at a time in turn (decode steps of a batch) each keep one run of consecutive
    blocks while the pool has room, where handing out the lowest free block would interleave them."""
    pool = BlockPool(64, 4)
    tables = [BlockTable(pool) for _ in range(4)]
    for n in range(1, 9):
        for t in tables:
            t.reserve(4 * (n - 1), 4 * n)
    for t in tables:
        assert t.blocks == list(range(t.blocks[0], t.blocks[0] + 8)) and t.slot_range(32) is not None
    assert len({b for t in tables for b in t.blocks}) == 32
