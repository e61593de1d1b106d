"""The float32 floor of a run (bench/bound.py): its multiply-adds against torch's own count of a forward, and its
closed forms against a position-by-position count."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from helpers.model_files import random_tiny_llama
from helpers.tiny_models import forward_cached
from tinyllm.bench import bound
from tinyllm.cache.kv_cache import KVCache


@pytest.mark.parametrize("stored", [0, 5, 17])
def test_a_decode_token_costs_what_torch_counts(stored):
    # a soft-capped model runs attention as two matmuls, which torch's flop counter sees (its CPU SDPA it does not)
    model = random_tiny_llama(attn_softcap=50.0)
    c = model.config
    cache = KVCache(c.num_layers, c.num_kv_heads, c.head_dim, 32)
    with torch.no_grad():
        if stored:
            forward_cached(model, torch.arange(stored).view(1, -1) % c.vocab_size, cache)
        with FlopCounterMode(display=False) as counter:
            forward_cached(model, torch.tensor([[3]]), cache)
    k = bound.costs(model)
    keys = stored + 1
    assert 2 * (k.layers + k.head + c.num_layers * k.per_key * keys) == counter.get_total_flops()
    # and the layers' linear maps alone, by the weights' shapes
    hidden, inner, q, kv = c.hidden_size, c.intermediate_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    assert k.layers == c.num_layers * (hidden * (q + 2 * kv) + q * hidden + 3 * hidden * inner)
    assert k.last_layer == k.layers // c.num_layers and k.last_layer_kv == hidden * 2 * kv
    assert k.head == hidden * c.vocab_size and k.per_key == 2 * q


def by_position(k: bound.Costs, prompt: int, output: int, cached: int) -> int:
    """request_macs counted one fed position and one layer at a time."""
    total = output * k.head
    last = len(k.windows) - 1
    for pos in range(cached, prompt + output - 1):
        unread = pos < prompt - 1  # a prompt row whose logits no one reads
        for layer, window in enumerate(k.windows):
            if layer == last and unread:
                total += k.last_layer_kv
                continue
            total += k.layers // len(k.windows)  # every layer's linear maps are alike here
            total += k.per_key * (pos + 1 if window is None else min(pos + 1, window))
    return total


@pytest.mark.parametrize("windows", [(None, None, None), (4, None, 4), (None, 3, 1)])
def test_closed_forms_equal_the_count_by_position(windows):
    base = bound.costs(random_tiny_llama())
    k = bound.Costs(base.layers, base.last_layer, base.last_layer_kv, base.head, base.per_key, windows)
    for prompt, output, cached in [(1, 1, 0), (1, 5, 0), (6, 1, 0), (9, 4, 0), (9, 4, 4), (9, 4, 8), (9, 4, 9)]:
        assert bound.request_macs(k, prompt, output, cached) == by_position(k, prompt, output, cached), (
            windows,
            prompt,
            output,
            cached,
        )
    assert bound.request_macs(k, 3, 0, 0) == 0  # nothing out: nothing it needed


def test_the_default_model_costs(default_model_path):
    from tinyllm.llm import LLM

    llm = LLM(default_model_path)
    k = bound.costs(llm.model)
    assert (k.layers, k.last_layer_kv, k.head) == (30 * 3_538_944, 576 * 384, 576 * 49152)  # SmolLM2-135M's shapes
    f = bound.floor(llm.model, [(100, 50, 0), (20, 1, 16)], 100.0)
    macs = bound.request_macs(k, 100, 50, 0) + bound.request_macs(k, 20, 1, 16)
    assert f == {"float32_gmacs": macs / 1e9, "fma_gmacs_per_s": 100.0, "float32_floor_s": macs / 1e9 / 100.0}
    assert bound.floor(llm.model, [(100, 50, 0)], None) is None  # no FMA rate measured


@pytest.mark.slow
def test_a_decode_step_reads_the_file_s_weights(default_model_path):
    import gguf

    from tinyllm.llm import LLM

    llm = LLM(default_model_path)
    tensors = gguf.GGUFReader(default_model_path).tensors
    stored = sum(
        t.n_bytes for t in tensors if t.name.startswith("blk.") or t.name in ("token_embd.weight", "output_norm.weight")
    )
    c = llm.model.config
    weights, kv = bound.decode_bytes(llm.model, 4, 32, 9)
    assert weights == stored  # the layers, the head (tied: the embedding's Q8_0 blocks) and the final norm
    # steps at positions 32..39 read 33..40 keys and values of every layer
    assert kv == sum(range(33, 41)) * c.num_layers * 2 * c.num_kv_heads * c.head_dim * 4
    f = bound.memory_floor(llm.model, 4, 32, 9, 25.0)
    assert f["floor_s"] == pytest.approx((8 * weights + kv) / 25e9) and f["most_tokens_per_s"] == pytest.approx(
        8 / f["floor_s"]
    )
    assert bound.memory_floor(llm.model, 4, 32, 1, 25.0) is None  # no decode step


@pytest.mark.parametrize("kinds", [("full", "full", "full"), ("sliding", "full", "sliding")])
def test_key_and_value_bytes_by_position(kinds):
    model = random_tiny_llama(layer_kinds=kinds, sliding_window=4)
    c = model.config
    weights, kv = bound.decode_bytes(model, 2, 5, 7)
    assert weights == sum(p.nbytes for p in model.parameters()) - model.model.embed_tokens.weight.nbytes
    per_key = 2 * c.num_kv_heads * c.head_dim * 2  # a key and its value in float16
    seen = [pos + 1 if kind == "full" else min(pos + 1, 4) for pos in range(5, 11) for kind in kinds]
    assert kv == per_key * sum(seen)


@pytest.mark.parametrize("request_", [(5, 2, 6), (5, -1, 0), (5, 2, -1)])
def test_a_request_that_cannot_be_is_named(request_):
    k = bound.costs(random_tiny_llama())
    with pytest.raises(ValueError, match="prompt tokens"):
        bound.request_macs(k, *request_)


def test_the_aim_is_read_against_the_floor():
    from tinyllm.bench.throughput import compare

    floor = {"float32_floor_s": 9.0, "most_output_tokens_per_s": 3000 / 9.0}
    run = {"concurrency": 32, "output_tokens": 3000, "output_tokens_per_s": 150.0, "decode_tokens_per_s": 310.0}
    out = compare([{**run, "float32_floor": floor}], [], [])
    # 3000 tokens at the aim's 300 a second take 10 s, of which the floor's 9 s at the cores' FMA rate: 90%
    assert out["aim_needs_share_of_fma_rate"] == pytest.approx(0.9)
    assert out["most_output_tokens_per_s_at_32"] == pytest.approx(3000 / 9.0)
    assert not out["aim_reached"] and out["aim_reached_in_decode_steps"]
    assert "aim_needs_share_of_fma_rate" not in compare([{**run, "float32_floor": None}], [], [])


def test_a_mixture_of_experts_token_costs_and_reads_its_experts_alone():
    """A token's matmuls run through top_k of num_experts experts: torch counts those, and a decode step's
    weight bytes are the model's less the other experts'."""
    from helpers.tiny_models import tiny_llama
    from tinyllm.config import ExpertConfig

    model = tiny_llama(0, family="qwen3_moe", num_layers=2, attn_softcap=50.0, experts=ExpertConfig(4, 1, 32))
    c = model.config
    cache = KVCache(c.num_layers, c.num_kv_heads, c.head_dim, 32)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        forward_cached(model, torch.tensor([[3]]), cache)
    k = bound.costs(model)
    assert 2 * (k.layers + k.head + c.num_layers * k.per_key) == counter.get_total_flops()
    weights, _ = bound.decode_bytes(model, 4, 8, 2)
    every = sum(p.nbytes for p in model.parameters()) - model.model.embed_tokens.weight.nbytes  # untied head
    assert weights == every - c.num_layers * 3 * (3 * c.hidden_size * 32 * 4)  # 3 of 4 experts skipped a layer
