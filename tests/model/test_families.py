"""Every family against transformers and against itself: HF folder logits == transformers', GGUF == HF
folder, cached == recompute, paged == contiguous, engine batch == alone, speculative == plain. Prompts are
longer than the sliding window, so every windowed path is exercised past its edge."""

from types import SimpleNamespace

import pytest
import torch

from helpers.family_models import FAMILY_NAMES, WINDOW, family_files
from tinyllm import LLM, KVCache
from tinyllm.cache.paged_cache import PagedKVCache
from tinyllm.model.step import CacheStep
from tinyllm.reference import cache_dims

PROMPT = [5, 77, 140, 9, 33, 201, 18, 64, 250, 7, 99, 120, 41]  # 13 > WINDOW positions
REPETITIVE = [30, 31, 32, 33, 34, 30, 31, 32, 33, 34, 30, 31, 32]
GREEDY = dict(temperature=0, max_tokens=10, ignore_eos=True, logprobs=3)


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def fam(request, tmp_path_factory):
    ref, folder, gguf_path = family_files(request.param, str(tmp_path_factory.mktemp("families")))
    return SimpleNamespace(name=request.param, ref=ref, folder=folder, gguf=gguf_path, llm=LLM(folder))


def logits(model, ids, step=None):
    with torch.no_grad():
        return model(torch.tensor([ids]), step)[0]  # [T, V]


def logprob_table(g) -> list[float]:
    """Each generated token's logprob and its top alternatives', in order."""
    return [v for t in g.logprobs for v in (t.logprob, *(lp for _, lp in t.top))]


def test_hf_folder_logits_match_transformers(fam):
    assert len(PROMPT) > WINDOW
    with torch.no_grad():
        ref = fam.ref(torch.tensor([PROMPT])).logits[0]  # [T, V]
    ours = logits(fam.llm.model, PROMPT)
    assert fam.llm.config.family == fam.name
    assert (ours - ref).abs().max().item() <= 1e-4
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


def test_gguf_logits_equal_the_hf_folder(fam):
    from_gguf = LLM(fam.gguf, weights="dequantized")
    assert from_gguf.config.family == ("llama" if fam.name == "mistral" else fam.name)
    if fam.name.startswith("qwen"):
        assert from_gguf.tokenizer.kind == "byte-level BPE (pre-tokenizer: qwen2)"
    assert (logits(from_gguf.model, PROMPT) - logits(fam.llm.model, PROMPT)).abs().max().item() <= 1e-5
    # Llama 3's scaled frequencies: from rope_scaling (HF) and from the rope_freqs tensor (GGUF) alike
    assert torch.allclose(from_gguf.model.rotary.inv_freq, fam.llm.model.rotary.inv_freq, rtol=1e-6, atol=0)


@pytest.mark.parametrize("kind", ["contiguous", "paged"])
def test_chunked_cached_forward_equals_recompute(fam, kind):
    model = fam.llm.model
    n_layers, n_kv, d_head = cache_dims(model)[:3]
    cache = (
        KVCache(n_layers, n_kv, d_head, 32)
        if kind == "contiguous"
        else PagedKVCache.for_one_sequence(n_layers, n_kv, d_head, 32, block_size=4)
    )
    pieces, at = [], 0
    for size in (4, 3, 1, 1, 4):  # chunks and single decodes, crossing the window and block edges
        pieces.append(logits(model, PROMPT[at : at + size], CacheStep(cache, size)))
        at += size
    whole = logits(model, PROMPT)
    # float32 sums over different matmul shapes differ in their last bits, in proportion to the logits' size
    assert (torch.cat(pieces) - whole).abs().max().item() <= 1e-5 * max(1.0, whole.abs().max().item())


def test_engine_batch_equals_alone_and_the_reference_loop(fam):
    prompts = [PROMPT, PROMPT[:7], REPETITIVE]
    batched = fam.llm.generate(prompts, **GREEDY)
    chunked = fam.llm.generate(prompts, prefill_chunk=3, **GREEDY)
    for p, b, c in zip(prompts, batched, chunked):
        alone = fam.llm.generate(p, **GREEDY)
        reference = fam.llm.generate(p, cache="contiguous", **GREEDY)
        recompute = fam.llm.generate(p, cache="none", **GREEDY)
        assert b.ids == alone.ids == c.ids == reference.ids == recompute.ids
        # Logprobs too: a Gemma's greedy ids hardly depend on its windows, the probabilities do.
        for other in (alone, c, reference, recompute):
            assert logprob_table(b) == pytest.approx(logprob_table(other), abs=1e-4)


@pytest.mark.parametrize("speculative", ["ngram", {"method": "draft", "draft_layers": 1}])
def test_speculative_equals_plain(fam, speculative):
    plain = fam.llm.generate(REPETITIVE, **GREEDY)
    for cache in ("paged", "contiguous"):  # the engine, and the reference loop
        spec = fam.llm.generate(REPETITIVE, cache=cache, speculative=speculative, **GREEDY)
        assert spec.ids == plain.ids
        assert logprob_table(spec) == pytest.approx(logprob_table(plain), abs=1e-4)


def test_quantized_gguf_runs_on_its_blocks(fam, tmp_path):
    """Q8_0 matrices kept as blocks (biases stay float beside them) equal the same file dequantized."""
    from helpers.family_models import write_family_gguf

    path = write_family_gguf(fam.ref, fam.name, str(tmp_path / "q8.gguf"), quant="Q8_0")
    native, dequantized = LLM(path, weights="native"), LLM(path, weights="dequantized")
    assert native.info()["weight_types"].get("Q8_0", 0) > 0
    ours, ref = logits(native.model, PROMPT), logits(dequantized.model, PROMPT)
    assert (ours - ref).abs().max().item() <= 1e-4
