"""LatentCache and the small MLA attention that uses it as its hook."""

import pytest
import torch

from helpers.tiny_models import forward_cached
from tinyllm import LatentCache
from tinyllm.model.mla import MLAConfig, MLAForCausalLM


def tiny_mla(seed=0):
    torch.manual_seed(seed)
    model = MLAForCausalLM(MLAConfig())
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    return model.eval()


def mla_cache(model, max_len=64, dtype=torch.float32):
    c = model.config
    return LatentCache(c.num_layers, c.d_latent, c.d_rope, max_len, dtype=dtype)


def test_latent_cache_rules():
    cache = LatentCache(2, 3, 2, 5)
    assert cache.nbytes() == 2 * 1 * 5 * (3 + 2) * 4
    c, kr = torch.ones(1, 2, 3), torch.ones(1, 2, 2)
    out_c, out_kr = cache.update(0, c, kr)
    assert out_c.shape == (1, 2, 3) and out_kr.shape == (1, 2, 2)
    c.fill_(9)
    assert cache.c[0].max() == 1  # copied
    assert cache.seq_len() == 0 and cache.seq_len(0) == 2  # committed only after every layer
    cache.update(1, torch.ones(1, 2, 3), torch.ones(1, 2, 2))
    assert cache.seq_len() == 2 and cache.positions(2).tolist() == [2, 3]
    assert cache.mask(1).tolist() == [[True, True, True]]
    with pytest.raises(ValueError, match="max_len 5"):
        cache.update(0, torch.ones(1, 4, 3), torch.ones(1, 4, 2))
    with pytest.raises(ValueError, match="r=3"):
        cache.update(0, torch.ones(1, 1, 4), torch.ones(1, 1, 2))
    assert cache.seq_len(0) == 2
    cache.truncate(1)
    assert cache.seq_len(0) == cache.seq_len(1) == 1
    half = LatentCache(2, 3, 2, 5, dtype=torch.float16)
    assert half.nbytes() * 2 == cache.nbytes()
    x = torch.randn(1, 1, 3)
    assert torch.equal(half.update(0, x, torch.randn(1, 1, 2))[0], x.half().float())


def test_mla_cached_logits_equal_full_recompute():
    model = tiny_mla(1)
    ids = [3, 50, 7, 99, 12]
    with torch.no_grad():
        cache = mla_cache(model)
        logits = forward_cached(model, torch.tensor([ids[:3]]), cache)
        logits = forward_cached(model, torch.tensor([ids[3:]]), cache)[0, -1]  # chunked prefill
        for _ in range(16):
            full = model(torch.tensor([ids]))[0, -1]
            assert torch.allclose(logits, full, atol=1e-5, rtol=0)
            ids.append(int(full.argmax()))
            logits = forward_cached(model, torch.tensor([[ids[-1]]]), cache)[0, -1]


def test_mla_truncate_then_append_equals_never_appended():
    model = tiny_mla(2)
    with torch.no_grad():
        a, b = mla_cache(model), mla_cache(model)
        forward_cached(model, torch.tensor([[1, 2, 3, 4, 5, 6]]), a)
        a.truncate(3)
        out_a = forward_cached(model, torch.tensor([[9, 8]]), a)
        forward_cached(model, torch.tensor([[1, 2, 3]]), b)
        out_b = forward_cached(model, torch.tensor([[9, 8]]), b)
    assert torch.allclose(out_a, out_b, atol=1e-5, rtol=0)
