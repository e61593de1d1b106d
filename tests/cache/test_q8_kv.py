"""The q8_0 KV format (cache/q8_kv.py) and the caches that hold it: a value comes back within half a step of
its run's scale, the paged and the contiguous cache return the same values, and what a q8_0 pool costs."""

import pytest
import torch

from helpers.tiny_models import forward_cached, tiny_llama
from tinyllm import LLM, KVCache
from tinyllm.cache.paged_cache import PagedKVCache, PagedStorage
from tinyllm.cache.q8_kv import Q8_BLOCK, bytes_per_value, dequantize, quantize
from tinyllm.engine.engine import Engine
from tinyllm.errors import TinyLLMError
from tinyllm.reference import cache_dims


def test_a_hand_example():
    x = torch.zeros(64)
    x[0], x[1], x[2] = 254.0, -1.0, 1.5  # run 0: d = 2, q = 127, -0.5 -> -0 (ties to even), 0.75 -> 1
    x[32:] = 0.0  # run 1: all zero, d = 0
    q, d = quantize(x)
    assert d.tolist() == [2.0, 0.0]
    assert q[:3].tolist() == [127, 0, 1] and not q[3:].any()
    assert dequantize(q, d, torch.float32)[:3].tolist() == [254.0, 0.0, 2.0]


def test_values_come_back_within_half_a_step():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 4, 128, generator=g) * torch.rand(50, 4, 1, generator=g) * 10
    q, d = quantize(x)
    assert q.shape == x.shape and q.dtype == torch.int8 and d.shape == (50, 4, 128 // Q8_BLOCK)
    runs = x.unflatten(-1, (-1, Q8_BLOCK))
    assert torch.equal(d, (runs.abs().amax(-1) / 127).half())
    step = d.float().repeat_interleave(Q8_BLOCK, -1)
    # half a step, and the float16 rounding of d times |q| <= 127 where it rounded down
    assert ((dequantize(q, d, torch.float32) - x).abs() <= step * (0.5 + 127 * 2**-11)).all()
    assert dequantize(q, d, torch.bfloat16).dtype == torch.bfloat16


def test_paged_and_contiguous_q8_caches_return_the_same_values():
    g = torch.Generator().manual_seed(1)
    contiguous = KVCache(2, 3, 64, 40, dtype=torch.int8)
    paged = PagedKVCache.for_one_sequence(2, 3, 64, 40, block_size=4, dtype=torch.int8)
    written = []
    for t in (5, 1, 7, 1):
        k, v = torch.randn(1, 3, t, 64, generator=g), torch.randn(1, 3, t, 64, generator=g)
        written.append(k)
        for layer in range(2):
            a, b = contiguous.update(layer, k, v), paged.update(layer, k, v)
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    k_all = torch.cat(written, 2)
    assert torch.equal(a[0], dequantize(*quantize(k_all), torch.float32))  # earlier chunks read back unchanged
    assert contiguous.nbytes() == 2 * 2 * 3 * 40 * 64 * bytes_per_value(torch.int8)
    assert paged.nbytes() == 2 * 2 * 3 * 16 * 64 * (1 + 2 / 32)  # 4 blocks of 4 positions


def test_a_q8_model_forward_is_the_same_through_either_cache():
    model = tiny_llama(3, head_dim=32)
    ids = torch.randint(0, 96, (1, 13), generator=torch.Generator().manual_seed(1))
    n_layers, n_kv, d_head, _ = cache_dims(model)
    with torch.no_grad():
        a = KVCache(n_layers, n_kv, d_head, 64, dtype=torch.int8)
        b = PagedKVCache.for_one_sequence(n_layers, n_kv, d_head, 64, block_size=4, dtype=torch.int8)
        wide = KVCache(n_layers, n_kv, d_head, 64)
        for lo, hi in ((0, 6), (6, 7), (7, 13)):
            x, y = forward_cached(model, ids[:, lo:hi], a), forward_cached(model, ids[:, lo:hi], b)
            assert torch.equal(x, y)
            z = forward_cached(model, ids[:, lo:hi], wide)
            assert 0 < (x - z).abs().max() <= 0.05 * z.abs().max()  # quantized, but close


def test_block_copies_and_the_pools_pages_carry_the_scales():
    storage = PagedStorage(2, 2, 64, 8, 4, dtype=torch.int8)
    storage.prefault()
    assert [t.dtype for t in storage.tensors()] == [torch.int8, torch.int8, torch.float16, torch.float16]
    k = torch.randn(3, 2, 64)
    storage.write(1, torch.tensor([4, 5, 6]), k, -k)
    storage.copy_block(1, 3)
    a, b = storage.gather(1, torch.tensor([12, 13, 14]), torch.float32)
    assert torch.equal(a, dequantize(*quantize(k), torch.float32)) and torch.equal(b, -a)
    assert storage.nbytes() == 2 * 2 * 32 * 2 * 64 * (1 + 2 / 32)


def test_a_q8_pool_holds_about_twice_the_tokens_of_a_float16_one(smollm_tokenizer):
    llm = LLM.from_parts(tiny_llama(2, head_dim=32, vocab_size=smollm_tokenizer.vocab_size), smollm_tokenizer)
    sizes = {kv: Engine(llm.parts, kv_memory_bytes=1 << 20, kv_dtype=kv).pool.num_blocks for kv in ("float16", "q8_0")}
    assert sizes["q8_0"] == int(sizes["float16"] * 2 / (1 + 2 / 32))
    g = llm.generate("Hello there", kv_dtype="q8_0", temperature=0, max_tokens=4, ignore_eos=True)
    assert len(g.ids) == 4 and llm._shared.engine.storage.dtype == torch.int8


def test_q8_needs_a_head_dim_that_is_a_multiple_of_32(smollm_tokenizer):
    llm = LLM.from_parts(tiny_llama(2, head_dim=16, vocab_size=smollm_tokenizer.vocab_size), smollm_tokenizer)
    for cache in ("paged", "contiguous"):
        with pytest.raises(TinyLLMError, match="kv_dtype q8_0 needs a head_dim that is a multiple of 32, got 16"):
            llm.generate("x", kv_dtype="q8_0", cache=cache, max_tokens=2)
    with pytest.raises(TinyLLMError, match="kv_dtype must be one of float32, float16, bfloat16, q8_0, got 'q4'"):
        llm.generate("x", kv_dtype="q4", max_tokens=2)
