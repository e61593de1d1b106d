"""Tensor parallelism (gloo, localhost): a tiny random model split over 2 and 4 processes computes what one
process computes. One group per size serves every test of this module (starting processes dominates).

Bound: the ranks' partial sums are added in another order than one matmul adds them, so logits differ by a
few float32 ulps of the magnitudes summed; 1e-5 leaves nothing for a wrong head, row, slot or KV pool."""

import random

import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, SamplingParams, TinyLLMError
from tinyllm.distributed import launcher
from tinyllm.engine.engine import Engine
from tinyllm.speculative.proposer import SpeculativeConfig

GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
GREEDY_24 = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
SEED = 13


def model(vocab_size: int):
    # 4 heads and 2 KV heads: split two ways on 2 ranks, replicated KV heads on 4
    return tiny_llama(SEED, vocab_size=vocab_size, max_position_embeddings=256)


@pytest.fixture(scope="module")
def single(smollm_tokenizer):
    return LLM.from_parts(model(smollm_tokenizer.vocab_size), smollm_tokenizer)


@pytest.fixture(scope="module", params=[2, 4])
def parallel(request, smollm_tokenizer):
    llm = LLM.from_parts(model(smollm_tokenizer.vocab_size), smollm_tokenizer, tensor_parallel_size=request.param)
    try:
        yield llm
    finally:
        llm.close()
        assert not any(w.is_alive() for w in llm.tensor_parallel.workers)


def prompts(n, seed, lo=3, hi=40):
    rng = random.Random(seed)
    return [[rng.randrange(3, 49152) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def recorded(engine: Engine) -> list:
    """Every forward's logits rows, as the driver receives them."""
    seen, forward = [], engine.runner.forward

    def record(inputs, rows):
        logits = forward(inputs, rows)
        seen.append(logits.clone())
        return logits

    engine.runner.forward = record
    return seen


def run(llm, ps, params, **options):
    engine = Engine(llm.parts, **options)
    ids = engine.add_requests(ps, params)
    while engine.has_unfinished():
        engine.step()
    assert engine.pool_stats().used == 0
    return [engine.generation(i) for i in ids]


@pytest.mark.slow
def test_logits_equal_one_process(single, parallel):
    ps = prompts(3, seed=1)
    p = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, prompt_logprobs=1)
    options = dict(max_num_seqs=4, max_num_batched_tokens=32, block_size=8, num_blocks=64)
    logits = []
    for llm in (single, parallel):
        engine = Engine(llm.parts, **options)
        seen = recorded(engine)
        engine.add_requests(ps, p)
        while engine.has_unfinished():
            engine.step()
        logits.append(seen)
    assert len(logits[0]) == len(logits[1]) > 6  # chunked prefills, then decodes
    for a, b in zip(*logits):
        assert a.shape == b.shape and a.shape[1] == single.config.vocab_size
        assert (a - b).abs().max() <= 1e-5 * b.abs().max()


def test_each_rank_holds_its_share(parallel):
    n = parallel.tensor_parallel.config.tensor_parallel_size
    attn = parallel.model.model.layers[0].self_attn
    assert attn.num_heads == 4 // n and attn.num_kv_heads == max(1, 2 // n)
    assert attn.qkv_proj.weight.shape[0] == (4 // n + 2 * max(1, 2 // n)) * 16
    assert attn.o_proj.inner.weight.shape[1] == 4 // n * 16
    engine = Engine(parallel.parts, block_size=8, num_blocks=16)
    assert engine.storage.k.shape == (3, 16 * 8, max(1, 2 // n), 16)  # [L, N*P, Hkv local, D]


@pytest.mark.slow
def test_greedy_with_prefix_sharing_and_preemption(single, parallel):
    system = prompts(1, seed=2, lo=40, hi=40)[0]
    ps = [system + t for t in prompts(6, seed=3, lo=2, hi=9)] + prompts(4, seed=4)
    tight = dict(max_num_seqs=10, max_num_batched_tokens=48, block_size=8, num_blocks=22)
    want = run(single, ps, GREEDY, **tight)
    got = run(parallel, ps, GREEDY, **tight)
    assert [g.ids for g in got] == [g.ids for g in want]
    assert sum(g.stats["preemptions"] for g in got) > 0  # the pool really was too small
    assert sum(g.stats["cached_tokens"] for g in got) >= 5 * 40 // 8 * 8  # later requests reused the prefix


@pytest.mark.slow
def test_seeded_sampling_and_speculative_decoding(single, parallel):
    ps = prompts(4, seed=5)
    params = [SamplingParams(temperature=1.0, top_p=0.9, seed=7 + i, max_tokens=8, ignore_eos=True) for i in range(4)]
    assert [g.ids for g in run(parallel, ps, params)] == [g.ids for g in run(single, ps, params)]
    base = [11, 12, 13, 14, 15, 16]
    repetitive = [base * 3, base * 2 + [99, 98], [5] * 20]  # greedy output of [5] * 20 repeats itself
    spec, drafted = SpeculativeConfig("ngram", num_draft_tokens=3), 0
    for p in (GREEDY_24, SamplingParams(temperature=0.8, seed=3, max_tokens=10, ignore_eos=True)):
        want = run(single, repetitive, p)
        got = run(parallel, repetitive, p, speculative=spec, block_size=4)
        assert [g.ids for g in got] == [g.ids for g in want]
        drafted += sum(g.stats["drafted"] for g in got)
    assert drafted > 0


def test_the_reference_loop_and_self_drafts_are_refused(parallel):
    with pytest.raises(TinyLLMError, match="reference loop"):
        parallel.generate([5, 6, 7], cache="contiguous", max_tokens=2)
    with pytest.raises(TinyLLMError, match="draft_layers=1"):
        parallel.generate([5, 6, 7], speculative={"method": "draft", "draft_layers": 1}, max_tokens=2)


def test_a_model_whose_heads_do_not_divide_is_refused(smollm_tokenizer, monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(launcher.subprocess, "Popen", no_process)  # refused before starting anything
    with pytest.raises(TinyLLMError, match="4 attention heads do not divide by tensor_parallel_size=3"):
        LLM.from_parts(model(smollm_tokenizer.vocab_size), smollm_tokenizer, tensor_parallel_size=3)
