"""Speculative decoding inside the engine: same tokens as plain decoding, pool clean afterwards."""

import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, SamplingParams
from tinyllm.engine.engine import Engine
from tinyllm.speculative.proposer import SpeculativeConfig


@pytest.fixture(scope="module")
def llm(smollm_tokenizer):
    return LLM.from_parts(
        tiny_llama(51, vocab_size=smollm_tokenizer.vocab_size, num_layers=4, max_position_embeddings=256),
        smollm_tokenizer,
    )


def workload():
    base = [11, 12, 13, 14, 15, 16]
    return [base * 3, base * 2 + [99, 98], [7, 8, 9, 7, 8, 9, 7], [400, 401, 402, 403] * 4, [5] * 20]


def run(engine, prompts, params):
    ids = [engine.add_request(p, params) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    assert engine.pool_stats().used == 0
    return [engine.generation(i) for i in ids]


@pytest.mark.parametrize(
    "spec",
    [
        SpeculativeConfig("ngram", num_draft_tokens=3),
        SpeculativeConfig("draft", num_draft_tokens=2, draft_layers=2),
        SpeculativeConfig("draft", num_draft_tokens=3, draft_layers=3),
    ],
)
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_engine_speculative_equals_plain(llm, spec, temperature):
    params = SamplingParams(temperature=temperature, seed=9, max_tokens=14, ignore_eos=True)
    options = dict(max_num_seqs=5, max_num_batched_tokens=64, block_size=4, num_blocks=96)
    plain = run(Engine(llm.parts, **options), workload(), params)
    fast = run(Engine(llm.parts, speculative=spec, **options), workload(), params)
    assert [g.ids for g in fast] == [g.ids for g in plain]
    assert [g.text for g in fast] == [g.text for g in plain]
    if temperature == 0 or spec.method == "draft":  # random text rarely repeats an n-gram of the prompt
        assert sum(g.stats["drafted"] for g in fast) > 0
    assert all(g.stats["tokens_per_target_forward"] >= 1.0 for g in fast)


def test_engine_speculative_with_preemption(llm):
    params = SamplingParams(temperature=0.7, seed=3, max_tokens=16, ignore_eos=True)
    spec = SpeculativeConfig("ngram", num_draft_tokens=4)
    plain = run(Engine(llm.parts, max_num_seqs=5, block_size=4, num_blocks=200), workload(), params)
    tight = run(Engine(llm.parts, speculative=spec, max_num_seqs=5, block_size=4, num_blocks=14), workload(), params)
    assert [g.ids for g in tight] == [g.ids for g in plain]
    assert sum(g.stats["preemptions"] for g in tight) > 0
