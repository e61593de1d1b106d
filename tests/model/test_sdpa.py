"""Window masks against their definition, the ragged layout's narrowed masks against per-sequence masks, and
soft-capped attention against a plain loop over keys, and sinks against their definition."""

import math

import pytest
import torch

from tinyllm.cache.fill import offset_causal_mask
from tinyllm.model.ragged_attention import PrefillSlice, RaggedLayout, ragged_attention, windowed
from tinyllm.model.sdpa import AttentionSpec, attention, window_mask


@pytest.mark.parametrize("t_new, num_keys, window", [(4, 4, 2), (3, 10, 4), (1, 9, 3), (5, 12, 20), (6, 6, None)])
def test_window_mask_is_the_band_of_the_last_w_positions(t_new, num_keys, window):
    got = window_mask(offset_causal_mask(t_new, num_keys - t_new), t_new, num_keys, window)
    for i in range(t_new):
        q = num_keys - t_new + i
        for k in range(num_keys):
            assert bool(got[i, k]) == (k <= q and (window is None or k > q - window)), (i, k)
    assert torch.equal(window_mask(None, t_new, num_keys, window), got)  # None = causal


def test_window_mask_narrows_a_padded_batch_mask():
    real = torch.tensor([[True] * 8, [False] * 3 + [True] * 5])[:, None, None, :]  # [B, 1, 1, S]
    got = window_mask(real & offset_causal_mask(2, 6), 2, 8, 3)  # queries at slots 6 and 7
    slot6, slot7 = [False] * 4 + [True] * 3 + [False], [False] * 5 + [True] * 3
    assert got[0, 0].tolist() == got[1, 0].tolist() == [slot6, slot7]
    first = window_mask(real & offset_causal_mask(2, 6), 2, 8, 6)  # a wide window meets the padding
    assert first[1, 0, 0].tolist() == [False] * 3 + [True] * 4 + [False]


def test_windowed_decodes_gather_only_each_sequence_s_last_w_keys():
    lengths = [7, 3, 5]
    slots = torch.arange(100, 121).view(3, 7)  # [Bd, Smax], padded past each length
    mask = (torch.arange(7) < torch.tensor(lengths)[:, None])[:, None, None]  # [Bd, 1, 1, Smax]
    narrow = windowed(RaggedLayout(3, slots, mask, []), 4)
    for b, n in enumerate(lengths):
        kept = [int(s) for s, keep in zip(narrow.decode_slots[b], narrow.decode_mask[b, 0, 0]) if keep]
        assert kept == slots[b, max(0, n - 4) : n].tolist()
    assert narrow.decode_slots.shape == (3, 4)
    alone = windowed(RaggedLayout(1, slice(10, 16), None, []), 2)  # one query over a run of 6 slots
    assert alone.decode_slots == slice(14, 16) and alone.decode_mask is None
    short = RaggedLayout(1, slice(10, 12), None, [])
    assert windowed(short, 4).decode_slots == slice(10, 12)  # within the window: nothing to cut


def test_windowed_layout_narrows_every_group_and_keeps_the_original():
    prefill = PrefillSlice(2, 3, slice(0, 9), offset_causal_mask(3, 6))
    layout = RaggedLayout(2, torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 1, 1, 5, dtype=torch.bool), [prefill])
    narrow = windowed(layout, 2)
    assert narrow.decode_slots.shape == (2, 2) and narrow.decode_mask is None
    cut = narrow.prefills[0]  # the first query (position 6) sees positions 5 and 6: keys from slot 5 on
    assert cut.kv_slots == slice(5, 9) and torch.equal(cut.mask, window_mask(None, 3, 9, 2)[:, 5:])
    assert layout.prefills[0].mask.sum() == 3 * 6 + 6 and windowed(layout, None) is layout


@pytest.mark.parametrize("window", [1, 3, 6, 20])
def test_windowed_ragged_attention_equals_masking_every_key(window):
    torch.manual_seed(0)
    H, Hkv, D = 4, 2, 8
    keys, values = torch.randn(64, Hkv, D), torch.randn(64, Hkv, D)  # a pool of 64 slots

    def gather(slots):
        return keys[slots], values[slots]

    lengths = [9, 4, 12]
    table = torch.randperm(64)[:36].view(3, 12)  # [Bd, Smax]
    mask = (torch.arange(12) < torch.tensor(lengths)[:, None])[:, None, None]
    prefill = PrefillSlice(3, 5, torch.randperm(64)[:14], offset_causal_mask(5, 9))
    layout = RaggedLayout(3, table, mask, [prefill])
    q = torch.randn(1, H, 8, D)
    spec = AttentionSpec(scale=0.4, softcap=3.0, window=window)
    got = ragged_attention(q, gather, windowed(layout, window), spec)
    for b, n in enumerate(lengths):  # each decode query over its keys in the window, by plain attention
        first = max(0, n - window)
        k, v = (t[table[b, first:n]].transpose(0, 1)[None] for t in (keys, values))  # [1, Hkv, S, D]
        qd = q[:, :, b : b + 1].reshape(1, Hkv, H // Hkv, D)
        expect = attention(qd, k, v, None, AttentionSpec(scale=0.4, softcap=3.0)).reshape(H, D)
        assert torch.allclose(got[0, :, b], expect, atol=1e-6)
    k, v = (t[prefill.kv_slots].transpose(0, 1)[None] for t in (keys, values))
    expect = attention(q[:, :, 3:], k, v, window_mask(prefill.mask, 5, 14, window), spec)
    assert torch.allclose(got[:, :, 3:], expect, atol=1e-6)


def test_soft_capped_attention_equals_a_loop_over_keys():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 3, 8) * 3, torch.randn(1, 2, 7, 8) * 3, torch.randn(1, 2, 7, 8)  # GQA: 4 over 2
    spec = AttentionSpec(scale=0.3, softcap=2.0, window=3)
    mask = window_mask(None, 3, 7, 3)  # [T, S]
    out = attention(q, k, v, mask, spec)  # [1, H, T, D]
    for h in range(4):
        for t in range(3):
            keys = [j for j in range(7) if mask[t, j]]
            logits = [2.0 * math.tanh(0.3 * float(q[0, h, t] @ k[0, h // 2, j]) / 2.0) for j in keys]
            weights = torch.softmax(torch.tensor(logits), 0)
            expect = sum(w * v[0, h // 2, j] for w, j in zip(weights, keys))
            assert torch.allclose(out[0, h, t], expect, atol=1e-5)
    plain = attention(q, k, v, mask, AttentionSpec(scale=0.3))
    assert not torch.allclose(plain, out, atol=1e-3)  # the cap changes the result


def test_sinks_join_each_heads_denominator_and_take_no_value():
    """Against the definition: softmax over [q·k·scale..., sink_h] with the sink's share dropped; the same with
    a kv head's G query heads laid out as its G queries (the ragged decode's layout); a sink of -inf is none."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (
        torch.randn(1, 4, 3, 8, generator=g),
        torch.randn(1, 2, 5, 8, generator=g),
        torch.randn(1, 2, 5, 8, generator=g),
    )
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0])  # [H]
    mask = offset_causal_mask(3, 2)  # [T, S]
    got = attention(q, k, v, mask, AttentionSpec(sinks=sinks))
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)  # [1, H, S, D]
    scores = (q @ kk.transpose(-1, -2) / math.sqrt(8)).masked_fill(~mask, float("-inf"))  # [1, H, T, S]
    sink_column = sinks.view(1, 4, 1, 1).expand(1, 4, 3, 1)
    want = torch.softmax(torch.cat((scores, sink_column), dim=-1), dim=-1)[..., :-1] @ vv
    assert torch.allclose(got, want, rtol=0, atol=1e-6)
    assert not torch.allclose(got, attention(q, k, v, mask), atol=1e-3)  # the sinks change the output
    one = q[:, :, 2:]  # the last query, which sees every key: as 2 kv heads of G = 2 queries
    grouped = attention(one.reshape(1, 2, 2, 8), k, v, None, AttentionSpec(sinks=sinks))  # [1, Hkv, G, D]
    assert torch.allclose(grouped.reshape(1, 4, 1, 8), got[:, :, 2:], rtol=0, atol=1e-6)
    none = attention(q, k, v, mask, AttentionSpec(sinks=torch.full((4,), float("-inf"))))
    assert torch.allclose(none, attention(q, k, v, mask), rtol=0, atol=1e-6)
