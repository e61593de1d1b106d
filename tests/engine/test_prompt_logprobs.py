"""Prompt logprobs from the engine equal the log-softmax of the model's own full-forward logits at every prompt
position: alone, batched, in small prefill chunks, after a prefix-cache hit would have skipped positions, and
across preemption; they travel once, on the request's first output."""

import pytest
import torch

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, SamplingParams
from tinyllm.engine.engine import Engine

PROMPTS = [[5, 90, 310, 7, 44, 12, 900, 1000, 3, 8] * 4, [70, 71, 72], [9] * 37]


@pytest.fixture(scope="module")
def llm(smollm_tokenizer):
    model = tiny_llama(21, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=256)
    return LLM.from_parts(model, smollm_tokenizer)


def reference(llm, ids: list[int], top_n: int = 0):
    with torch.no_grad():
        logp = torch.log_softmax(llm.model(torch.tensor([ids]))[0].float(), dim=-1)  # [T, V]
    values = [logp[i, ids[i + 1]].item() for i in range(len(ids) - 1)]
    tops = [torch.topk(logp[i], top_n).indices.tolist() for i in range(len(ids) - 1)] if top_n else None
    return values, tops


def check(llm, gen, ids, top_n=0):
    want, tops = reference(llm, ids, top_n)
    got = gen.prompt_logprobs
    assert got[0] is None and len(got) == len(ids)
    assert [lp.token for lp in got[1:]] == ids[1:]
    assert [lp.logprob for lp in got[1:]] == pytest.approx(want, abs=1e-5)
    if top_n:
        assert [[i for i, _ in lp.top] for lp in got[1:]] == tops


def params(n=0, **kw):
    return SamplingParams(temperature=0, max_tokens=3, ignore_eos=True, prompt_logprobs=n, **kw)


def test_batched_and_chunked_prompt_logprobs_match_the_full_forward(llm):
    engine = Engine(llm.parts, max_num_batched_tokens=16, block_size=4)  # prompts span several chunks
    others = [SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)] * 2
    gens = engine.generate(PROMPTS + [[4, 5, 6], [7, 8]], [params(2), params(), params(1)] + others)
    for ids, gen, n in zip(PROMPTS, gens, (2, 0, 1)):
        check(llm, gen, ids, n)
    assert gens[3].prompt_logprobs is None and gens[4].prompt_logprobs is None


def test_a_cached_prefix_does_not_skip_positions(llm):
    engine = Engine(llm.parts, block_size=4)
    engine.generate([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=2))  # fills the prefix cache
    gen = engine.generate([PROMPTS[0]], params())[0]
    check(llm, gen, PROMPTS[0])
    assert gen.stats["cached_tokens"] == 0


def test_preemption_and_recompute_keep_each_position_once(llm):
    engine = Engine(llm.parts, block_size=4, num_blocks=24, max_num_batched_tokens=8)  # too few blocks for all
    long = [PROMPTS[0], PROMPTS[2], PROMPTS[0][::-1]]
    lp = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, prompt_logprobs=0)
    gens = engine.generate(long, [lp] * 3)
    assert sum(g.stats["preemptions"] for g in gens) > 0
    for ids, gen in zip(long, gens):
        check(llm, gen, ids)


def test_prompt_logprobs_leave_the_generated_tokens_unchanged(llm):
    with_lp = llm.generate(PROMPTS[0], params=params())
    without = llm.generate(PROMPTS[0], temperature=0, max_tokens=3, ignore_eos=True)
    assert with_lp.ids == without.ids and without.prompt_logprobs is None


def test_the_prompt_logprobs_travel_once_on_the_first_output(llm):
    engine = Engine(llm.parts, block_size=4)
    engine.add_request(PROMPTS[1], params(), "r")
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    first, *rest = [o.prompt_logprobs for o in outputs if o.request_id == "r"]
    assert [lp.logprob for lp in first[1:]] == [lp.logprob for lp in engine.generation("r").prompt_logprobs[1:]]
    assert len(first) == len(PROMPTS[1]) and len(rest) == 2 and rest == [None, None]
