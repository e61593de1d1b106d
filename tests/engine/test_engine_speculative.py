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
        SpeculativeConfig("ngram", num_draft_tokens=3, pacing=False),
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


def test_pacing_drafts_less_after_rejections_and_changes_no_token(llm):
    """A 1-layer self-draft of this random model is mostly rejected: paced, a request drafts at fewer steps
    than unpaced (each paused step is a plain one) and gives the same tokens."""
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    options = dict(max_num_seqs=5, block_size=4, num_blocks=200)
    out = {}
    for pacing in (True, False):
        spec = SpeculativeConfig("draft", num_draft_tokens=3, draft_layers=1, pacing=pacing)
        out[pacing] = run(Engine(llm.parts, speculative=spec, **options), workload(), params)
    assert [g.ids for g in out[True]] == [g.ids for g in out[False]]
    drafted = {p: sum(g.stats["drafted"] for g in gens) for p, gens in out.items()}
    accepted = {p: sum(g.stats["accepted"] for g in gens) for p, gens in out.items()}
    assert accepted[False] < drafted[False] / 2  # mostly rejected, so pacing has something to do
    assert 0 < drafted[True] < drafted[False]
