"""logit_bias through the engine and LLM.generate: it bans and forces tokens, each request keeps its own bias in a
batch, and a biased request gives the reference loop's answer however it is batched."""

import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, SamplingParams, TinyLLMError, generate

PROMPTS = [[5, 90, 310, 7], [44, 12, 900, 1000, 3, 8], [70, 71]]


@pytest.fixture(scope="module")
def llm(smollm_tokenizer):
    model = tiny_llama(21, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=256)
    return LLM.from_parts(model, smollm_tokenizer)


def greedy(**kw):
    return SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, **kw)


def test_minus_100_on_the_greedy_token_changes_it_and_plus_100_forces_one(llm):
    plain = llm.generate(PROMPTS[0], params=greedy())
    first = plain.ids[0]
    banned = llm.generate(PROMPTS[0], params=greedy(logit_bias={first: -100}))
    assert banned.ids[0] != first
    assert first not in banned.ids
    forced = llm.generate(PROMPTS[0], params=greedy(logit_bias={1234: 100}))
    assert forced.ids == [1234] * 6


def test_batched_equals_alone_with_a_different_bias_per_request(llm):
    biases = [{1234: 8.0, 99: -100}, {}, {7: 5.5, 300: 3.0}]
    params = [
        SamplingParams(temperature=0.9, seed=10 + i, max_tokens=8, ignore_eos=True, logit_bias=b)
        for i, b in enumerate(biases)
    ]
    batched = llm.engine().generate(PROMPTS, params)
    for prompt, p, got in zip(PROMPTS, params, batched):
        ref = generate(llm.model, llm.tokenizer, prompt, p, eos_ids=llm.eos_ids)
        assert got.ids == ref.ids
        assert [lp.logprob for lp in got.logprobs] == pytest.approx([lp.logprob for lp in ref.logprobs], abs=1e-5)
    assert 99 not in batched[0].ids


def test_an_id_outside_the_vocabulary_is_refused_before_anything_runs(llm):
    vocab = llm.config.vocab_size
    engine = llm.engine()
    with pytest.raises(TinyLLMError, match="logit_bias names token"):
        engine.add_requests([PROMPTS[0], PROMPTS[1]], [greedy(), greedy(logit_bias={vocab: 1.0})])
    assert not engine.has_unfinished() and not engine.requests
    with pytest.raises(TinyLLMError, match="logit_bias names token"):
        generate(llm.model, llm.tokenizer, PROMPTS[0], greedy(logit_bias={vocab: 1.0}))
