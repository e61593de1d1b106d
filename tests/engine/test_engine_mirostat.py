"""Mirostat in the engine: mu travels with the request's accepted tokens, so seeded output is the same with and
without speculative decoding (rejected drafts roll back to the mu of their position), after preemption and
recompute, batched or alone, and in the reference loop; and mirostat really changes the tokens."""

import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, SamplingParams
from tinyllm.engine.engine import Engine
from tinyllm.speculative.proposer import SpeculativeConfig

OPTIONS = dict(max_num_seqs=5, max_num_batched_tokens=64, block_size=4, num_blocks=96)


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
    """Each request's tokens and its mu per output position."""
    ids = [engine.add_request(p, params) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    assert engine.pool_stats().used == 0
    gens = [engine.generation(i) for i in ids]
    trails = [engine.requests[i].mirostat for i in ids]
    return gens, [None if t is None else t.mus for t in trails]


def mirostat(version: int, **more) -> SamplingParams:
    # eta 1 moves mu by about a bit a token, so a mu taken from the wrong position changes what is kept
    return SamplingParams(
        temperature=0.3, mirostat=version, mirostat_tau=3.0, mirostat_eta=1.0, seed=9, max_tokens=14, ignore_eos=True
    ).replace(**more)


def same_trails(a, b):
    # the logits of one position differ in their last bits between a verification forward and a decode step, and
    # between batch shapes; the draws are the same, and mu agrees to that rounding
    return all(x == pytest.approx(y, abs=1e-3) for x, y in zip(a, b))


@pytest.mark.parametrize("version", [1, 2])
def test_speculative_decoding_gives_plain_decodings_tokens_and_mu(llm, version):
    params = mirostat(version)
    plain, plain_mu = run(Engine(llm.parts, **OPTIONS), workload(), params)
    spec = SpeculativeConfig("draft", num_draft_tokens=3, draft_layers=3)
    fast, fast_mu = run(Engine(llm.parts, speculative=spec, **OPTIONS), workload(), params)
    assert [g.ids for g in fast] == [g.ids for g in plain]
    assert same_trails(fast_mu, plain_mu)
    assert all(len(mus) == len(g.ids) + 1 and mus[0] == 6.0 for mus, g in zip(plain_mu, plain))
    drafted, accepted = sum(g.stats["drafted"] for g in fast), sum(g.stats["accepted"] for g in fast)
    assert 0 < accepted < drafted  # drafts were taken and others rolled back


def test_preemption_batching_and_seeds_keep_the_tokens(llm):
    params = mirostat(2)
    plain, plain_mu = run(Engine(llm.parts, **OPTIONS), workload(), params)
    tight, tight_mu = run(Engine(llm.parts, max_num_seqs=5, block_size=4, num_blocks=14), workload(), params)
    assert [g.ids for g in tight] == [g.ids for g in plain]
    assert sum(g.stats["preemptions"] for g in tight) > 0
    assert same_trails(tight_mu, plain_mu)
    prompt = workload()[1]
    alone, _ = run(Engine(llm.parts, **OPTIONS), [prompt], params)
    assert alone[0].ids == plain[1].ids
    oracle = llm.generate(prompt, params=params, cache="contiguous")  # the reference loop
    assert oracle.ids == plain[1].ids
    without, no_mu = run(Engine(llm.parts, **OPTIONS), workload(), params.replace(mirostat=0))
    assert no_mu == [None] * 5
    assert [g.ids for g in without] != [g.ids for g in plain]  # mirostat changed what was drawn
