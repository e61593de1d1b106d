"""Prefix reuse below a block (engine/kv_manager.py): a prompt takes the cached block after its whole-block
prefix that agrees longest with its next tokens, a finished request's partial last block included. On the native
step (batch-invariant rows), every reuse gives the tokens and logprobs of a cache-free engine bit for bit, and
computes only what was not cached: the same prompt sent again computes its last token alone."""

import pytest

from helpers.tiny_models import quantized_copy, tiny_llama
from tinyllm import LLM, SamplingParams
from tinyllm.engine.engine import Engine
from tinyllm.kernels import native

pytestmark = pytest.mark.skipif(native.library() is None, reason="no native kernels on this machine")

P = 8  # block size
PROMPT = [101 + 7 * i for i in range(21)]  # two full blocks and 5 positions of a third


@pytest.fixture(scope="module")
def llm(smollm_tokenizer):
    shape = dict(hidden_size=64, intermediate_size=96, num_heads=4, num_kv_heads=2, head_dim=32)  # q8_0 KV: 32
    model = tiny_llama(5, **shape, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=256)
    return LLM.from_parts(quantized_copy(model, "int4"), smollm_tokenizer)


def params(n=6):
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=2)


def table(g):
    return g.ids, [(t.logprob, *(lp for _, lp in t.top)) for t in g.logprobs]


def run(engine, prompts, n=6):
    ids = [engine.add_request(p, params(n)) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    return [engine.generation(i) for i in ids]


def fresh(llm, prompt, n=6, kv_dtype="float32"):
    engine = Engine(llm.parts, block_size=P, num_blocks=32, enable_prefix_caching=False, kv_dtype=kv_dtype)
    return table(run(engine, [prompt], n)[0])


@pytest.mark.parametrize("kv_dtype", ["float32", "q8_0"])
def test_the_same_prompt_again_computes_its_last_token_only(llm, kv_dtype):
    engine = Engine(llm.parts, block_size=P, num_blocks=64, kv_dtype=kv_dtype)
    assert engine.runner.fused is not None
    (first,) = run(engine, [PROMPT])
    (again,) = run(engine, [PROMPT])
    assert first.stats["cached_tokens"] == 0 and again.stats["cached_tokens"] == len(PROMPT) - 1
    assert table(first) == table(again) == fresh(llm, PROMPT, kv_dtype=kv_dtype)
    boundary = PROMPT[:16]  # exactly two blocks: the second is reused for its first 7 positions
    (one,) = run(engine, [boundary])
    assert one.stats["cached_tokens"] == 15 and table(one) == fresh(llm, boundary, kv_dtype=kv_dtype)


def test_a_follow_up_reuses_the_answer_and_a_divergent_prompt_what_agrees(llm):
    engine = Engine(llm.parts, block_size=P, num_blocks=64)
    (first,) = run(engine, [PROMPT])
    # a next turn: the prompt, the answer but its last token (never computed), then new tokens
    follow = PROMPT + first.ids + [5, 6, 7]
    (turn,) = run(engine, [follow])
    assert turn.stats["cached_tokens"] == len(PROMPT) + len(first.ids) - 1
    assert table(turn) == fresh(llm, follow)
    diverge = PROMPT[:19] + [9, 9, 9, 9]  # agrees with the cached third block for 3 positions
    (other,) = run(engine, [diverge])
    assert other.stats["cached_tokens"] == 19 and table(other) == fresh(llm, diverge)


def test_a_running_requests_block_is_shared_and_copied_before_a_write(llm):
    engine = Engine(llm.parts, block_size=P, num_blocks=64, max_num_seqs=4)
    a = engine.add_request(PROMPT, params(12))
    engine.step()  # a's prompt computed: blocks 0 and 1 registered, a keeps decoding into block 2
    block1 = engine.kv.tables[a].blocks[1]
    late = PROMPT[:14] + [3, 4, 5]  # block 1 agrees for 6 positions
    b = engine.add_request(late, params(12))
    engine.step()  # b takes block 0 and block 1's first 6 positions, and writes position 14 into a copy
    assert engine.requests[b].num_cached_tokens == 14
    assert engine.kv.tables[a].blocks[1] == block1 != engine.kv.tables[b].blocks[1]
    while engine.has_unfinished():
        engine.step()
    assert table(engine.generation(a)) == fresh(llm, PROMPT, 12)
    assert table(engine.generation(b)) == fresh(llm, late, 12)
