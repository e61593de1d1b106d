"""The per-forward step: every kind (no cache, a contiguous cache, the engine's paged batch) gives the attention
the same answer through one `attend`, and the forward keeps the step's logit rows."""

import pytest
import torch

from helpers.tiny_models import tiny_llama
from tinyllm import KVCache
from tinyllm.cache.fill import offset_causal_mask
from tinyllm.cache.paged_cache import PagedStorage
from tinyllm.model.paged_batch import PagedBatch
from tinyllm.model.ragged_attention import PrefillSlice, RaggedLayout
from tinyllm.model.step import LAST, CacheStep, CausalStep
from tinyllm.reference import cache_dims

WINDOWED = dict(sliding_window=3, layer_kinds=("sliding", "full", "sliding"))


def paged_step(storage, slots: torch.Tensor, start: int, t_new: int) -> PagedBatch:
    """One sequence's chunk [start, start + t_new) as the engine's batch: a decode row, or a prefill slice."""
    stop = start + t_new
    if t_new == 1:
        layout = RaggedLayout(1, slots[None, :stop], None, [])
    else:
        layout = RaggedLayout(0, None, None, [PrefillSlice(0, t_new, slots[:stop], offset_causal_mask(t_new, start))])
    return PagedBatch(storage, slots[start:stop], torch.arange(start, stop), layout)


@pytest.mark.parametrize("layer", [0, 1])  # a sliding layer and a full one
def test_the_paged_batch_attends_as_the_contiguous_cache_and_no_cache(layer):
    model = tiny_llama(2, **WINDOWED)
    attn = model.model.layers[layer].self_attn
    assert attn.spec.window == (3 if layer == 0 else None)
    n_layers, n_kv, d_head, _ = cache_dims(model)
    x = torch.randn(1, 10, 64, generator=torch.Generator().manual_seed(3))
    cos, sin = model.rotary.cos_sin(torch.arange(10), x.dtype)
    contiguous = KVCache(n_layers, n_kv, d_head, 16)
    storage = PagedStorage(n_layers, n_kv, d_head, 8, 4)
    slots = torch.randperm(32, generator=torch.Generator().manual_seed(4))[:10]  # scattered over the blocks
    a, b, at = [], [], 0
    with torch.no_grad():
        whole = attn(x, cos, sin, CausalStep(10))
        for size in (6, 1, 3):  # a prefill, a decode, a chunk past the window
            part = slice(at, at + size)
            a.append(attn(x[:, part], cos[part], sin[part], CacheStep(contiguous, size)))
            contiguous._fill = [at + size] * n_layers  # as if every layer had appended
            b.append(attn(x[:, part], cos[part], sin[part], paged_step(storage, slots, at, size)))
            at += size
    assert torch.allclose(torch.cat(a, 1), whole, atol=1e-5, rtol=0)
    assert torch.allclose(torch.cat(b, 1), whole, atol=1e-5, rtol=0)


def test_logit_rows_keep_those_rows_of_every_kind():
    model = tiny_llama(4, **WINDOWED)
    ids = torch.randint(0, 96, (1, 9), generator=torch.Generator().manual_seed(5))
    rows = torch.tensor([2, 8, 5])
    with torch.no_grad():
        every = model(ids)  # [1, 9, V]
        last = model(ids, CausalStep(9, logit_rows=LAST))
        chosen = model(ids, CausalStep(9, logit_rows=rows))
        cache = KVCache(*cache_dims(model)[:3], 16)
        cached = model(ids, CacheStep(cache, 9, rows))
    assert last.shape == (1, 1, 96) and chosen.shape == cached.shape == (1, 3, 96)
    assert torch.allclose(last, every[:, -1:], atol=1e-5, rtol=0)
    assert torch.allclose(chosen, every[:, rows], atol=1e-5, rtol=0)
    assert torch.allclose(cached, chosen, atol=1e-5, rtol=0)


def test_a_step_must_hold_the_forwards_new_tokens():
    model = tiny_llama(4)
    cache = KVCache(*cache_dims(model)[:3], 16)
    with pytest.raises(ValueError, match="2 positions for 3 new tokens"):
        model(torch.tensor([[1, 2, 3]]), CacheStep(cache, 2))
    assert cache.seq_len() == 0  # refused before any layer stored
