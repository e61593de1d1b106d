"""Window masks against their definition, the ragged layout's narrowed masks against per-sequence masks, and
soft-capped attention against a plain loop over keys."""

import math

import pytest
import torch

from tinyllm.cache.fill import offset_causal_mask
from tinyllm.model.ragged_attention import PrefillSlice, RaggedLayout, windowed
from tinyllm.model.sdpa import AttentionSpec, attention, window_decode_mask, window_mask


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


def test_decode_masks_keep_the_last_w_keys_of_each_sequence():
    lengths = [7, 3, 5]
    mask = (torch.arange(7) < torch.tensor(lengths)[:, None])[:, None, None]  # [Bd, 1, 1, Smax]
    got = window_decode_mask(mask, 7, 4)
    for b, n in enumerate(lengths):
        assert got[b, 0, 0].tolist() == [max(0, n - 4) <= j < n for j in range(7)]
    alone = window_decode_mask(None, 6, 2)  # one query over all 6 keys
    assert alone.shape == (1, 1, 1, 6) and alone.flatten().tolist() == [False] * 4 + [True] * 2


def test_windowed_layout_narrows_every_group_and_keeps_the_original():
    prefill = PrefillSlice(2, 3, slice(0, 9), offset_causal_mask(3, 6))
    layout = RaggedLayout(2, torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 1, 1, 5, dtype=torch.bool), [prefill])
    narrow = windowed(layout, 2)
    assert narrow.decode_mask[0, 0, 0].tolist() == [False] * 3 + [True] * 2
    assert torch.equal(narrow.prefills[0].mask, window_mask(None, 3, 9, 2))
    assert layout.prefills[0].mask.sum() == 3 * 6 + 6 and windowed(layout, None) is layout


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
