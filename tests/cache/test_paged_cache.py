"""PagedKVCache honours the KVCache contract: same returns as contiguous storage, rollback, copy-on-write."""

import ctypes
import ctypes.util
import gc
import mmap
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.tiny_models import forward_cached, tiny_llama
from tinyllm import KVCache
from tinyllm.cache.block_pool import BlockPool
from tinyllm.cache.block_table import blocks_for
from tinyllm.cache.paged_cache import PagedKVCache, PagedStorage, lazy_zeros
from tinyllm.reference import cache_dims


def paged_for(model, max_len=64, block_size=4, dtype=torch.float32, num_blocks=None):
    n_layers, n_kv, d_head, _ = cache_dims(model)
    storage = PagedStorage(n_layers, n_kv, d_head, num_blocks or max_len // block_size + 4, block_size, dtype)
    return PagedKVCache(storage, BlockPool(storage.num_blocks, block_size), max_len)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_paged_returns_exactly_what_contiguous_returns(dtype):
    torch.manual_seed(0)
    contiguous = KVCache(2, 3, 4, 32, dtype=dtype)
    paged = PagedKVCache.for_one_sequence(2, 3, 4, 32, block_size=4, dtype=dtype)
    for t in (5, 1, 3, 1, 7):
        k, v = torch.randn(1, 3, t, 4), torch.randn(1, 3, t, 4)
        for layer in range(2):
            a, b = contiguous.update(layer, k, v), paged.update(layer, k, v)
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert paged.seq_len() == contiguous.seq_len()
        assert torch.equal(paged.mask(2), contiguous.mask(2))
        assert torch.equal(paged.positions(2), contiguous.positions(2))


def test_paged_model_logits_equal_contiguous():
    model = tiny_llama(3)
    ids = torch.randint(0, 96, (1, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a = KVCache(*cache_dims(model)[:3], 64)
        b = paged_for(model)
        for lo, hi in ((0, 6), (6, 7), (7, 13)):
            assert torch.equal(forward_cached(model, ids[:, lo:hi], a), forward_cached(model, ids[:, lo:hi], b))


def test_truncate_releases_whole_blocks():
    cache = PagedKVCache.for_one_sequence(1, 1, 2, 32, block_size=4)
    x = torch.ones(1, 1, 10, 2)
    cache.update(0, x, x)
    assert len(cache.block_table) == 3 and cache.pool.num_free == 5
    cache.truncate(5)
    assert len(cache.block_table) == 2 and cache.pool.num_free == 6 and cache.seq_len() == 5
    cache.truncate(4)
    assert len(cache.block_table) == 1
    cache.release()
    assert cache.pool.num_free == 8 and cache.block_table == []


def test_shared_block_is_copied_on_write():
    storage = PagedStorage(1, 1, 2, 8, block_size=4)
    pool = BlockPool(8, 4)
    a = PagedKVCache(storage, pool, 32)
    a.update(0, torch.ones(1, 1, 6, 2), torch.ones(1, 1, 6, 2))
    for block in a.block_table:
        pool.acquire(block)
    b = PagedKVCache(storage, pool, 32, block_table=list(a.block_table), num_cached=6)
    b.truncate(5)  # keeps the shared second block, untouched
    assert b.block_table == a.block_table
    k_b, _ = b.update(0, torch.full((1, 1, 1, 2), 7.0), torch.full((1, 1, 1, 2), 7.0))
    assert b.block_table[0] == a.block_table[0] and b.block_table[1] != a.block_table[1]
    assert k_b[0, 0, :, 0].tolist() == [1, 1, 1, 1, 1, 7]
    k_a = storage.k[0, a.slots(0, 6), 0, 0]
    assert k_a.tolist() == [1] * 6  # the other sequence's KV is unchanged


def test_out_of_blocks_changes_nothing():
    cache = PagedKVCache.for_one_sequence(2, 1, 2, 8, block_size=4)
    cache.pool.allocate()  # someone else holds one of the two blocks
    x = torch.ones(1, 1, 5, 2)
    with pytest.raises(ValueError, match="out of KV blocks"):
        cache.update(0, x, x)
    assert cache.block_table == [] and cache.seq_len(0) == 0 and cache.pool.num_free == 1


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 6)), min_size=1, max_size=5))
def test_paged_equals_contiguous_under_appends_and_rollbacks(ops):
    """Random appends and truncations: the paged cache returns what the contiguous one does."""
    g = torch.Generator().manual_seed(len(ops))
    a, b = KVCache(2, 1, 2, 64), PagedKVCache.for_one_sequence(2, 1, 2, 64, block_size=3)
    for t, back in ops:
        k = torch.randn(1, 1, t, 2, generator=g)
        for layer in range(2):
            ra, rb = a.update(layer, k, -k), b.update(layer, k, -k)
            assert torch.equal(ra[0], rb[0]) and torch.equal(ra[1], rb[1])
        n = max(0, a.seq_len() - back)
        a.truncate(n), b.truncate(n)
        assert len(b.block_table) == blocks_for(n, 3)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_lazy_zeros_is_a_writable_zero_tensor_that_outlives_its_maker(dtype):
    t = lazy_zeros((3, 1000, 48), dtype, "cpu")
    assert t.shape == (3, 1000, 48) and t.dtype == dtype and t.is_contiguous()
    assert not t.any()
    layer = t[1]
    del t
    gc.collect()
    layer[7] = 2.5  # the mapping lives as long as a view of it
    assert layer[7].eq(2.5).all() and layer.sum().item() == 2.5 * 48
    assert lazy_zeros((0, 4), dtype, "cpu").shape == (0, 4)


def resident_fraction(t: torch.Tensor) -> float:
    """Share of the whole pages under t that are resident in memory (mincore)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    page = mmap.PAGESIZE
    lo = -(-t.data_ptr() // page) * page
    hi = (t.data_ptr() + t.numel() * t.element_size()) // page * page
    vec = ctypes.create_string_buffer((hi - lo) // page)
    assert libc.mincore(lo, hi - lo, vec) == 0, ctypes.get_errno()
    return sum(b & 1 for b in vec.raw) / len(vec.raw)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore as Linux has it")
def test_prefault_maps_every_page_of_the_pool_and_leaves_it_zero():
    storage = PagedStorage(2, 2, 64, 2560, 16)  # 2 x 40 MiB of lazily mapped zeros
    storage.prefault()
    assert resident_fraction(storage.k) == 1.0 and resident_fraction(storage.v) == 1.0
    assert not storage.k.any() and not storage.v.any()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore as Linux has it")
@pytest.mark.parametrize("dtype", [torch.float32, torch.int8])
def test_a_resident_storage_has_every_page_mapped_at_creation_and_reads_zero(dtype):
    storage = PagedStorage(2, 2, 64, 1280, 16, dtype=dtype, resident=True)  # 2 x 20 MiB (float32) of zeros
    assert storage.resident
    assert all(resident_fraction(t) == 1.0 for t in storage.tensors())
    assert not any(t.any() for t in storage.tensors())
