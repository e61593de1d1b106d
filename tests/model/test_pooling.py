"""Pooling and batching of embeddings: by hand on small tensors; batched against one text at a time."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.tiny_models import tiny_llama
from tinyllm.model.pooling import Pooling, batches, embed_ids, pool


def test_pool_reads_only_each_texts_own_positions():
    states = torch.arange(2 * 3 * 2, dtype=torch.float32).view(2, 3, 2)  # [B, T, C]
    lengths = torch.tensor([3, 1])
    torch.testing.assert_close(pool(states, lengths, Pooling.MEAN), torch.tensor([[2.0, 3.0], [6.0, 7.0]]))
    torch.testing.assert_close(pool(states, lengths, Pooling.LAST), torch.tensor([[4.0, 5.0], [6.0, 7.0]]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 50), max_size=30), st.integers(1, 120))
def test_batches_cover_every_text_once_within_the_budget(lengths, max_tokens):
    groups = list(batches(lengths, max_tokens))
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) == 1 or len(g) * max(lengths[i] for i in g) <= max_tokens


def test_a_batch_gives_each_text_what_it_gets_alone():
    model = tiny_llama(5)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [3], [4, 4, 4], list(range(1, 30))]
    for how in Pooling:
        together = embed_ids(model, prompts, how, normalize=False, max_batch_tokens=64)
        alone = torch.cat([embed_ids(model, [p], how, normalize=False) for p in prompts])
        torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)
