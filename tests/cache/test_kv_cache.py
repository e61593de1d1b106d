"""KVCache: the seed's hand example, exactness against a full recompute, and every boundary of update."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.tiny_models import forward_cached, tiny_llama
from tinyllm import KVCache
from tinyllm.cache.fill import offset_causal_mask
from tinyllm.model.step import CacheStep, CausalStep
from tinyllm.reference import cache_dims


def make_cache(model, max_len=128, dtype=torch.float32, batch=1):
    n_layers, n_kv, d_head, _ = cache_dims(model)
    return KVCache(n_layers, n_kv, d_head, max_len, batch=batch, dtype=dtype)


def test_hand_example():
    cache = KVCache(1, 1, 2, 4)
    k = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).view(1, 1, 2, 2)
    k_all, v_all = cache.update(0, k, k)
    assert torch.equal(k_all, k) and cache.seq_len() == 2
    assert cache.positions(1).tolist() == [2]
    k_all, _ = cache.update(0, torch.tensor([5.0, 6.0]).view(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
    assert k_all.view(3, 2).tolist() == [[1, 2], [3, 4], [5, 6]]
    assert cache.seq_len() == 3
    assert cache.mask(1).tolist() == [[True, True, True, True]]
    assert cache.nbytes() == 64


def test_mask_is_causal_with_offset():
    cache = KVCache(1, 1, 2, 16)
    cache.update(0, torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))
    mask = cache.mask(2)
    assert mask.shape == (2, 5)
    assert mask.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    for s in range(6):
        for t in range(1, 5):
            m = offset_causal_mask(t, s)
            ref = torch.tensor([[j <= s + i for j in range(s + t)] for i in range(t)])
            assert torch.equal(m, ref)


def test_cached_logits_equal_full_recompute():
    model = tiny_llama(1)
    torch.manual_seed(0)
    ids = torch.randint(0, 96, (1, 7)).tolist()[0]
    cache = make_cache(model)
    with torch.no_grad():
        logits = forward_cached(model, torch.tensor([ids]), cache)[0, -1]
        for step in range(20):
            full = model(torch.tensor([ids]))[0, -1]
            assert torch.allclose(logits, full, atol=1e-5, rtol=0), step
            ids.append(int(full.argmax()))
            assert cache.seq_len() == len(ids) - 1
            logits = forward_cached(model, torch.tensor([[ids[-1]]]), cache)[0, -1]


def test_decode_position_matters():
    """A decode token fed at the wrong position must change the logits (the test above can see it)."""
    model = tiny_llama(1)
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        cache = make_cache(model)
        forward_cached(model, ids[:, :3], cache)
        right = forward_cached(model, ids[:, 3:], cache)
        cache2 = make_cache(model)
        forward_cached(model, ids[:, :3], cache2)
        step = CacheStep(cache2, 1)
        step.positions = torch.tensor([0])
        wrong = model(ids[:, 3:], step)
    assert (right - wrong).abs().max() > 1e-3


def test_chunked_prefill_equals_whole():
    model = tiny_llama(2)
    torch.manual_seed(1)
    ids = torch.randint(0, 96, (1, 11))
    with torch.no_grad():
        whole = model(ids)
        cache = make_cache(model)
        parts, start = [], 0
        for size in (3, 1, 5, 2):
            parts.append(forward_cached(model, ids[:, start : start + size], cache))
            start += size
    assert torch.allclose(torch.cat(parts, dim=1), whole, atol=1e-5, rtol=0)


def test_attention_layer_through_the_cache():
    model = tiny_llama(3)
    attn = model.model.layers[0].self_attn
    torch.manual_seed(2)
    x = torch.randn(1, 9, 64)
    cos, sin = model.rotary.cos_sin(torch.arange(9), x.dtype)
    with torch.no_grad():
        full = attn(x, cos, sin, CausalStep(9))
        cache = make_cache(model)
        first = attn(x[:, :5], cos[:5], sin[:5], CacheStep(cache, 5))
        cache._fill = [5] * len(cache._fill)  # as if every layer had appended
        rest = attn(x[:, 5:], cos[5:], sin[5:], CacheStep(cache, 4))
    assert torch.allclose(torch.cat([first, rest], 1), full, atol=1e-5, rtol=0)


def test_batched_cache_equals_single_rows():
    model = tiny_llama(4)
    torch.manual_seed(3)
    ids = torch.randint(0, 96, (3, 6))
    with torch.no_grad():
        cache = make_cache(model, batch=3)
        forward_cached(model, ids[:, :4], cache)
        batched = forward_cached(model, ids[:, 4:], cache)
        for b in range(3):
            alone = model(ids[b : b + 1])[:, 4:]
            assert torch.allclose(batched[b : b + 1], alone, atol=1e-5, rtol=0)


def test_update_copies_and_checks():
    cache = KVCache(2, 2, 4, 5)
    k = torch.ones(1, 2, 3, 4)
    k_all, _ = cache.update(0, k, k)
    k.fill_(7.0)  # the caller reuses its buffer
    assert cache.update(1, torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4))[0].max() == 1.0
    assert cache.k[0].max() == 1.0
    before = (cache.k.clone(), cache.v.clone(), cache.seq_len(0))
    with pytest.raises(ValueError, match="max_len 5"):
        cache.update(0, torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4))
    with pytest.raises(ValueError, match="Hkv=2"):
        cache.update(0, torch.ones(1, 3, 1, 4), torch.ones(1, 3, 1, 4))
    with pytest.raises(ValueError, match="differ"):
        cache.update(0, torch.ones(1, 2, 1, 4), torch.ones(1, 2, 2, 4))
    with pytest.raises(ValueError, match="layer"):
        cache.update(2, torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))
    assert torch.equal(cache.k, before[0]) and torch.equal(cache.v, before[1]) and cache.seq_len(0) == before[2]
    for bad in (dict(n_layers=0), dict(max_len=-1), dict(batch=1.5), dict(dtype=torch.int32)):
        args = dict(n_layers=1, n_kv_heads=1, d_head=2, max_len=4) | bad
        with pytest.raises(ValueError):
            KVCache(**args)


def test_seq_len_commits_after_every_layer():
    model = tiny_llama(5)
    cache = make_cache(model)
    seen = []
    original = cache.update

    def spy(layer, k, v):
        seen.append((layer, cache.seq_len(), cache.seq_len(layer)))
        return original(layer, k, v)

    cache.update = spy
    with torch.no_grad():
        forward_cached(model, torch.tensor([[1, 2, 3]]), cache)
        forward_cached(model, torch.tensor([[4]]), cache)
    assert seen[:3] == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    assert seen[3:] == [(0, 3, 3), (1, 3, 3), (2, 3, 3)]
    assert cache.seq_len() == 4


@settings(max_examples=25, deadline=None)
@given(first=st.integers(1, 6), extra=st.integers(1, 6), keep=st.integers(0, 6), again=st.integers(1, 4))
def test_truncate_rolls_back(first, extra, keep, again):
    keep = min(keep, first)
    model = tiny_llama(6)
    g = torch.Generator().manual_seed(first * 100 + extra)
    ids = torch.randint(0, 96, (1, first + extra), generator=g)
    new = torch.randint(0, 96, (1, again), generator=g)
    with torch.no_grad():
        a = make_cache(model, max_len=32)
        forward_cached(model, ids, a)
        a.truncate(keep)
        assert all(a.seq_len(i) == keep for i in range(3))
        out_a = forward_cached(model, new, a)
        b = make_cache(model, max_len=32)
        if keep:
            forward_cached(model, ids[:, :keep], b)
        out_b = forward_cached(model, new, b)
    assert torch.allclose(out_a, out_b, atol=1e-5, rtol=0)
    s = keep + again
    assert torch.allclose(a.k[:, :, :, :s], b.k[:, :, :, :s], atol=1e-5, rtol=0)


def test_truncate_checks_its_argument():
    cache = KVCache(2, 1, 2, 8)
    cache.update(0, torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))
    cache.update(1, torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))
    for bad in (-1, 4, 1.0):
        with pytest.raises(ValueError, match="truncate"):
            cache.truncate(bad)
    assert cache.seq_len() == 3


def test_float16_cache_rounds_what_it_stores():
    c32 = KVCache(1, 1, 4, 8)
    c16 = KVCache(1, 1, 4, 8, dtype=torch.float16)
    assert c16.nbytes() * 2 == c32.nbytes()
    assert c32.nbytes() == 2 * 1 * 1 * 1 * 8 * 4 * 4
    torch.manual_seed(0)
    k1, k2 = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 1, 4)
    c16.update(0, k1, k1)
    k_all, v_all = c16.update(0, k2, k2)
    expected = torch.cat([k1, k2], 2).half().float()
    assert k_all.dtype == torch.float32
    assert torch.equal(k_all, expected) and torch.equal(v_all, expected)
    assert not torch.equal(k_all[:, :, 2:], k2)  # the new chunk comes back rounded too


def test_float16_generation_stays_close():
    model = tiny_llama(7)
    ids = [5, 9, 3, 17, 40]
    with torch.no_grad():
        a, b = make_cache(model), make_cache(model, dtype=torch.float16)
        la = forward_cached(model, torch.tensor([ids]), a)[0, -1]
        lb = forward_cached(model, torch.tensor([ids]), b)[0, -1]
        for _ in range(16):
            assert (la - lb).abs().max() < 2e-2
            assert int(la.argmax()) == int(lb.argmax())
            nxt = int(la.argmax())
            la = forward_cached(model, torch.tensor([[nxt]]), a)[0, -1]
            lb = forward_cached(model, torch.tensor([[nxt]]), b)[0, -1]
