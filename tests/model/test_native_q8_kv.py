"""The q8_0 KV cache (cache/q8_kv.py) in the native step (model/native/csrc/kv.h): its store quantizes as torch
does, bit for bit, on the SIMD and the portable builds; one step over a q8_0 storage gives the module path's
logits over the same stored values within 1e-5 (the bound of test_native_lowering); the keys and values it
stores are those the module path stores, bit for bit at the first layer (the same float32 inputs) and within one
quantization step after it (inputs that differ in summation order may straddle a rounding midpoint)."""

import pytest
import torch
from test_native_lowering import StoredKV, copy_storage, prompts, run, scattered_step, tiny_llm, variant

from tinyllm import LLM, SamplingParams
from tinyllm.cache.q8_kv import Q8_BLOCK, dequantize, quantize
from tinyllm.engine.engine import Engine
from tinyllm.engine.runner import execute
from tinyllm.errors import TinyLLMError
from tinyllm.kernels import native
from tinyllm.model.native.library import library as decoder_library
from tinyllm.model.native.lowering import build_stack, decode_logits
from tinyllm.speculative.proposer import SpeculativeConfig

pytestmark = pytest.mark.skipif(decoder_library() is None, reason="no native decode step on this machine")


@pytest.fixture(scope="module")
def llm(smollm_tokenizer):
    return tiny_llm(smollm_tokenizer)


def native_q8(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """values [n] float32 (n a multiple of 32) quantized by the native step's own store."""
    q = torch.empty(values.shape[0], dtype=torch.int8)
    d = torch.empty(values.shape[0] // Q8_BLOCK, dtype=torch.float16)
    assert decoder_library().tl_kv_q8(values.data_ptr(), values.shape[0], q.data_ptr(), d.data_ptr()) == 0
    return q, d


def hard_values() -> torch.Tensor:
    """Runs of 32: zeros, a single nonzero, values at a rounding tie (x / d = k + 1/2 exactly), a scale that
    is a float16 subnormal (so x / d passes 127 and is clamped), a scale that rounds up, one that overflows
    float16, and random runs over magnitudes 2^-40 .. 2^40."""
    runs = [torch.zeros(32), torch.zeros(32).index_fill_(0, torch.tensor([5]), -3.0)]
    tie = torch.full((32,), 0.5)
    tie[0] = 127.0  # d = 1: 0.5 / 1 is a tie, rounded to even (0); 2.5 -> 2
    tie[1:4] = torch.tensor([2.5, -1.5, 126.5])
    runs += [tie, torch.full((32,), 1e-6), torch.linspace(-1, 1, 32) * 1.0009765625 * 127 / 127.03]
    runs += [torch.full((32,), 1e7)]
    g = torch.Generator().manual_seed(1)
    scale = 2.0 ** torch.randint(-40, 40, (500, 1), generator=g).float()
    runs += list(torch.randn(500, 32, generator=g) * scale)
    return torch.cat(runs)


@pytest.mark.parametrize("scalar", [False, True])
def test_the_native_store_quantizes_as_torch(scalar, monkeypatch):
    if scalar:
        monkeypatch.setenv("TINYLLM_NATIVE", "scalar")
    native.reset()
    try:
        values = hard_values()
        (q, d), (tq, td) = native_q8(values), quantize(values)
        assert torch.equal(d.view(torch.int16), td.view(torch.int16))
        assert torch.equal(q, tq)
        assert (q.abs() <= 127).all() and q[:32].eq(0).all()
    finally:
        native.reset()


@pytest.mark.parametrize("name", ["llama-int8", "window", "head-dim-64", "gemma3", "scale-softcap", "three-per-kv"])
def test_q8_kv_step_equals_the_module_path(name, threads):
    model = variant(name)
    lengths = (1, 9, 23, 70, 16, 130)
    num_blocks = sum((n + 3) // 4 for n in lengths)
    storage, inputs, key_slots = scattered_step(model, list(lengths), 7, num_blocks, torch.int8)
    wide = copy_storage(storage, dtype=torch.float32)  # the same keys and values, widened exactly
    rows = torch.arange(len(lengths))
    with torch.inference_mode():
        args = (inputs.ids[0], inputs.positions, inputs.write_slots, key_slots, rows)
        ours = decode_logits(model, build_stack(model, storage), *args)
        decode_logits(model, build_stack(model, wide), *args)  # the float32 keys and values a wide cache gets
        stored = copy_storage(storage, StoredKV)  # with the keys and values the native step stored
        ref = execute(model, stored, inputs, rows)  # [N, V]
    assert (ours - ref).abs().max() <= 1e-5 * ref.abs().max()
    slots = inputs.write_slots
    for mine, scale, theirs in ((storage.k, storage.k_scale, wide.k), (storage.v, storage.v_scale, wide.v)):
        q, d = quantize(theirs[0, slots])
        assert torch.equal(mine[0, slots], q) and torch.equal(scale[0, slots], d)
    for layer, (k, v) in stored.written.items():
        for mine, scale, theirs in ((storage.k, storage.k_scale, k), (storage.v, storage.v_scale, v)):
            a = dequantize(mine[layer, slots], scale[layer, slots], torch.float32)
            step = scale[layer, slots].float().repeat_interleave(Q8_BLOCK, -1)
            assert ((a - dequantize(*theirs, torch.float32)).abs() <= step).all()


def test_q8_kv_on_the_portable_build(monkeypatch):
    monkeypatch.setenv("TINYLLM_NATIVE", "scalar")
    native.reset()
    try:
        assert native.library().tl_simd() == 0
        test_q8_kv_step_equals_the_module_path("window", 1)
    finally:
        native.reset()


def test_a_head_dim_that_is_no_multiple_of_32_is_refused():
    with pytest.raises(TinyLLMError, match="q8_0 needs a head_dim that is a multiple of 32, got 80"):
        scattered_step(variant("head-dim-80"), [3], 0, 4, torch.int8)


def test_q8_kv_generations_keep_the_engines_promises(llm):
    """Over a q8_0 cache, through the native step: batched == alone, a prefix-cache hit == its recomputation,
    a chunked prompt == the whole prompt, preempted == uninterrupted; bit for bit (token ids and logprobs). The
    keys a later token reads are the stored ones in every case."""
    shared = [11, 12, 13, 14, 15, 16, 17, 18] * 3
    ps = [shared + p for p in prompts(6, seed=5)] + [[40, 41, 42, 43] * 4]
    params = [SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, logprobs=2)] * len(ps)
    engine = lambda **kw: Engine(llm.parts, block_size=8, kv_dtype="q8_0", **kw)  # noqa: E731
    table = lambda gs: [(g.ids, [(t.logprob, *(lp for _, lp in t.top)) for t in g.logprobs]) for g in gs]  # noqa: E731
    first = engine(num_blocks=128, max_num_seqs=8)
    assert first.runner.fused is not None and first.storage.k.dtype == torch.int8
    batched = table(run(first, ps, params))
    alone = table([run(engine(num_blocks=64, enable_prefix_caching=False), [p], params[:1])[0] for p in ps])
    assert batched == alone
    cached = engine(num_blocks=128)
    run(cached, ps[:1], params[:1])  # the shared prefix's blocks stay cached
    hits = run(cached, ps[1:], params[1:])
    assert table(hits) == alone[1:] and all(g.stats["cached_tokens"] >= 16 for g in hits[:5])
    assert table(run(engine(num_blocks=128, max_num_seqs=8, max_num_batched_tokens=7), ps, params)) == alone
    tight = run(engine(num_blocks=14, max_num_seqs=8), ps, params)
    assert table(tight) == alone and sum(g.stats["preemptions"] for g in tight) > 0


def test_q8_kv_speculative_equals_plain(default_model_path):
    """The default model repeating a paragraph over a q8_0 cache: n-gram drafts accepted and rejected (rolled
    back), the output and its logprobs those of plain decoding, bit for bit."""
    llm = LLM(default_model_path)
    text = "The quick brown fox jumps over the lazy dog near the river bank. " * 3 + "The quick brown cat"
    ps = [llm.tokenizer.encode(text, False)]
    params = [SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=2)]
    engine = lambda **kw: Engine(llm.parts, block_size=16, num_blocks=64, kv_dtype="q8_0", **kw)  # noqa: E731
    ours, plain = run(engine(speculative=SpeculativeConfig()), ps, params)[0], run(engine(), ps, params)[0]
    assert ours.stats["accepted"] >= 4 and ours.stats["accepted"] < ours.stats["drafted"]
    table = lambda g: (g.ids, [(t.logprob, *(lp for _, lp in t.top)) for t in g.logprobs])  # noqa: E731
    assert table(ours) == table(plain)
