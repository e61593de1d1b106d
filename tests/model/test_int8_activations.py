"""weights="native-int8": the activations of every 32-element block format are quantized to 8 bits.

The mode gives up equality with the reference: a difference of one ulp in an activation can move its code by
one, so it is held to other guarantees. Every matmul row is the same arithmetic alone or batched and at any
thread count (tests/kernels/test_q8act.py). So a decoded token's logits do not depend on the tokens beside it,
bit for bit: greedy alone == batched, speculative == plain, seeded alone == batched. The loader flags exactly
the weights the mode covers, and refuses a model it cannot cover. On the default model the loss stays close to
float activations (slow test)."""

import random

import pytest
import torch

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm import LLM, SamplingParams
from tinyllm.engine.engine import Engine
from tinyllm.errors import TinyLLMError
from tinyllm.kernels import native
from tinyllm.model.quant_linear import quant_weights
from tinyllm.perplexity import perplexity

pytestmark = pytest.mark.skipif(native.library() is None, reason="no native kernels on this machine")

TINY = dict(hidden_size=64, intermediate_size=96, num_heads=4, num_kv_heads=2, head_dim=16)


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    model = random_tiny_llama(8, **TINY)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peaked, as a trained model's: seeded draws sit far from token edges
    folder = tmp_path_factory.mktemp("int8")
    paths = {"float": str(folder / "f.gguf"), "q4_1": str(folder / "q.gguf")}
    write_gguf(model, paths["float"])
    write_gguf(model, paths["q4_1"], quant_types={"weight": "Q4_1"})
    return paths


@pytest.fixture(scope="module")
def llm(gguf):
    return LLM(gguf["q4_1"], weights="native-int8")


def test_the_loader_flags_the_weights_it_covers(gguf, llm):
    flagged = {w.fmt: w.int8_activations for w in quant_weights(llm.model)}
    assert flagged and all(flagged.values())
    assert not any(w.int8_activations for w in quant_weights(LLM(gguf["q4_1"]).model))
    quantized = LLM(gguf["float"], weights="native-int8", quantize="int4")
    assert all(w.int8_activations for w in quant_weights(quantized.model))
    with pytest.raises(TinyLLMError, match=r"weights='native-int8' needs weights kept as blocks \(Q4_0, Q4_1"):
        LLM(gguf["float"], weights="native-int8")
    with pytest.raises(TinyLLMError, match="weights='native-int8' runs on the CPU only"):
        LLM(gguf["q4_1"], weights="native-int8", device="meta")


def test_it_changes_the_logits_a_little(gguf, llm):
    """The mode is on: logits move from float activations' by much more than float32 noise, and little."""
    ids = torch.tensor([[5, 9, 14, 20, 33, 41, 2, 7]])
    with torch.inference_mode():
        exact = LLM(gguf["q4_1"]).model(ids)
        ours = llm.model(ids)
    err = (ours - exact).abs().max().item()
    assert 1e-4 * exact.abs().max().item() < err < 0.05 * exact.abs().max().item()


def prompts(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 250) for _ in range(rng.randint(3, 30))] for _ in range(n)]


def run(engine, ps, params):
    ids = [engine.add_request(p, sp) for p, sp in zip(ps, params)]
    while engine.has_unfinished():
        engine.step()
    return [engine.generation(i) for i in ids]


def table(g):
    return [v for t in g.logprobs for v in (t.logprob, *(lp for _, lp in t.top))]


def test_greedy_alone_equals_batched_bit_for_bit(llm):
    ps = prompts(8, seed=1)
    params = [SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=2)] * 8
    batched = run(Engine(llm.parts, block_size=8, num_blocks=128, max_num_seqs=8), ps, params)
    assert Engine(llm.parts, block_size=8, num_blocks=16).runner.fused is not None  # decodes run the native step
    for p, b in zip(ps, batched):
        alone = run(Engine(llm.parts, block_size=8, num_blocks=64), [p], params[:1])[0]
        assert alone.ids == b.ids and table(alone) == table(b)


def test_every_step_runs_the_native_step_and_prompt_chunking_changes_no_bit(llm):
    """Prompt chunks run the native step too, a token's arithmetic the same in any chunk or step: prompts cut
    into 5-token chunks or run whole beside others (one of 120 tokens) give the same ids and logprobs, bit for
    bit, and prompt logprobs likewise."""
    rng = random.Random(4)
    ps = prompts(5, seed=4) + [[rng.randrange(3, 250) for _ in range(120)]]
    params = [SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=2, prompt_logprobs=1)] * 6
    forwards = []
    whole = Engine(llm.parts, block_size=8, num_blocks=256, max_num_seqs=6, max_num_batched_tokens=512)

    def forward(inputs, rows, run_forward=whole.runner.forward):
        forwards.append(type(inputs.layout).__name__)
        return run_forward(inputs, rows)

    whole.runner.forward = forward
    ours = run(whole, ps, params)
    assert forwards and set(forwards) == {"NativeKeys"}
    chunked = run(Engine(llm.parts, block_size=8, num_blocks=256, max_num_seqs=6, max_num_batched_tokens=5), ps, params)
    prompt_table = lambda g: [(t.token, t.logprob) for t in g.prompt_logprobs[1:]]  # noqa: E731
    for a, b in zip(ours, chunked):
        assert a.ids == b.ids and table(a) == table(b) and prompt_table(a) == prompt_table(b)


def test_speculative_equals_plain_bit_for_bit(llm):
    p = [40, 41, 42, 43, 40, 41, 42, 43, 40, 41, 42]
    greedy = dict(temperature=0, max_tokens=16, ignore_eos=True, logprobs=2)
    plain = llm.generate(p, **greedy)
    spec = llm.generate(p, speculative="ngram", **greedy)
    assert spec.ids == plain.ids and table(spec) == table(plain)


def test_seeded_sampling_alone_equals_batched(llm):
    ps = prompts(10, seed=2)
    params = [SamplingParams(temperature=1.0, top_p=0.9, seed=7 + i, max_tokens=10, ignore_eos=True) for i in range(10)]
    solo = [run(Engine(llm.parts, block_size=8, num_blocks=64), [p], [sp])[0].ids for p, sp in zip(ps, params)]
    batched = run(Engine(llm.parts, max_num_seqs=10, block_size=8, num_blocks=256), ps, params)
    assert [g.ids for g in batched] == solo


@pytest.mark.slow
def test_default_model_loss_stays_close_to_float_activations():
    """Measured: perplexity 52.12 against 52.05 with float activations (+0.13%) on 1024 tokens of README.md."""
    text = open(__file__.rsplit("/tests/", 1)[0] + "/README.md").read()[:6000]
    scores = {}
    for weights in ("native", "native-int8"):
        llm = LLM(weights=weights)
        ids = llm.tokenizer.encode(text)[:1024]
        scores[weights] = perplexity(llm, ids, context=512).perplexity
    assert scores["native-int8"] != scores["native"]
    assert abs(scores["native-int8"] / scores["native"] - 1) < 0.02
