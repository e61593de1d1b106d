"""LLM.embed against HF transformers: the same tiny model written as an HF folder, its `last_hidden_state` (after
the final norm) pooled by hand, each text alone; ours pools right-padded batches."""

import pytest
import torch
import torch.nn.functional as F

from helpers.model_files import random_tiny_llama, write_hf_folder
from tinyllm import LLM
from tinyllm.errors import TinyLLMError

TEXTS = ["a", "the quick brown fox", "jumps over the lazy dog, twice: over and over", "z" * 40, "mid length text"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_hf_folder(random_tiny_llama(3), str(tmp_path_factory.mktemp("embed")))


@pytest.fixture(scope="module")
def llm(folder):
    return LLM(folder)


@pytest.fixture(scope="module")
def hf_states(folder, llm):
    """Each text's final hidden states [T, C] from transformers, run alone."""
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    states = []
    with torch.no_grad():
        for text in TEXTS:
            ids = torch.tensor([llm.tokenizer.encode(text)])
            states.append(hf.model(input_ids=ids).last_hidden_state[0])  # [T, C]
    return states


@pytest.mark.parametrize("pooling", ["mean", "last"])
@pytest.mark.parametrize("normalize", [True, False])
def test_embed_matches_transformers_pooled_the_same_way(llm, hf_states, pooling, normalize):
    ours = llm.embed(TEXTS, pooling=pooling, normalize=normalize)  # [N, C]
    ref = torch.stack([s.mean(0) if pooling == "mean" else s[-1] for s in hf_states])  # [N, C]
    if normalize:
        ref = F.normalize(ref, dim=-1)
    assert ours.shape == (len(TEXTS), llm.config.hidden_size) and ours.dtype == torch.float32
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=0)


def test_normalized_vectors_have_unit_length_and_a_text_gives_one_vector(llm):
    vectors = llm.embed(TEXTS)
    torch.testing.assert_close(vectors.norm(dim=-1), torch.ones(len(TEXTS)))
    torch.testing.assert_close(llm.embed(TEXTS[2]), vectors[2], atol=1e-5, rtol=0)


def test_token_ids_embed_as_their_text_does(llm):
    ids = llm.tokenizer.encode(TEXTS[1])
    torch.testing.assert_close(llm.embed(ids), llm.embed(TEXTS[1]), atol=1e-6, rtol=0)
    torch.testing.assert_close(llm.embed([ids, TEXTS[0]])[0], llm.embed(TEXTS[1]), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("inputs", "options", "message"),
    [
        ("", {}, "empty"),
        ([[]], {}, "empty"),
        ([10**9], {}, "out of range"),
        ("x", {"pooling": "max"}, "pooling must be 'mean' or 'last', got 'max'"),
    ],
)
def test_bad_input_is_a_user_error(llm, inputs, options, message):
    with pytest.raises(TinyLLMError, match=message):
        llm.embed(inputs, **options)


def test_an_input_longer_than_the_context_is_refused(llm):
    with pytest.raises(TinyLLMError, match="more than the model's context length of 128"):
        llm.embed([1] * 129)
    assert llm.embed([1] * 128).shape == (llm.config.hidden_size,)
