"""Quantized weights kept as blocks (model/quant_linear.py) against the dequantized reference: a tiny random
Llama written as a GGUF with quantized tensors, loaded both ways.

Bound: the native path differs from "dequantize, then F.linear" only in the order of float32 sums, so each
logit differs by a few ulps of the magnitudes summed; 1e-5 of the largest logit leaves room for that through
every layer and nothing for a wrong block, row or scale (those move logits by whole percents)."""

import pytest
import torch

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm import LLM
from tinyllm.kernels import FORMATS, native
from tinyllm.kernels.native import dequantize_rows
from tinyllm.loading.loader import load
from tinyllm.model.quant_linear import QuantEmbedding, QuantLinear, quant_weights

IDS = torch.tensor([[5, 80, 200, 7, 33, 150, 9, 260, 1, 44]])
QUANT_MODEL = dict(hidden_size=256, intermediate_size=256, num_heads=4, num_kv_heads=2, head_dim=64)
RELATIVE_BOUND = 1e-5


def both_ways(tmp_path, kind: str, tied: bool = False, seed: int = 2):
    model = random_tiny_llama(seed, tie_word_embeddings=tied, **QUANT_MODEL)
    path = str(tmp_path / f"{kind}.gguf")
    write_gguf(model, path, quant_types={"weight": kind})
    return path, load(path, weights="native"), load(path, weights="dequantized")


def assert_close(a: torch.Tensor, b: torch.Tensor) -> None:
    assert (a - b).abs().max() <= RELATIVE_BOUND * b.abs().max()


@pytest.mark.parametrize("kind", list(FORMATS))
def test_native_logits_equal_dequantized(tmp_path, kind):
    _, native, ref = both_ways(tmp_path, kind)
    assert all(w.fmt == kind for w in quant_weights(native.model))
    assert isinstance(native.model.model.layers[0].self_attn.qkv_proj, QuantLinear)
    assert not quant_weights(ref.model)
    with torch.inference_mode():
        assert_close(native.model(IDS), ref.model(IDS))


def test_tied_head_multiplies_by_the_embeddings_blocks(tmp_path):
    _, native, ref = both_ways(tmp_path, "Q8_0", tied=True)
    embed, head = native.model.model.embed_tokens, native.model.lm_head
    assert isinstance(embed, QuantEmbedding) and head.parts == [embed.weight]
    assert head.parts[0] is embed.weight  # held once
    with torch.inference_mode():
        assert torch.equal(embed(IDS), ref.model.model.embed_tokens(IDS))  # row lookups dequantize exactly
        assert_close(native.model(IDS), ref.model(IDS))


def test_native_cached_equals_recompute_and_greedy_ids_match(tmp_path):
    path, _, _ = both_ways(tmp_path, "Q4_1")
    native, ref = LLM(path, weights="native"), LLM(path, weights="dequantized")
    ids = IDS[0].tolist()
    cached = native.generate(ids, max_tokens=12, temperature=0, ignore_eos=True)
    recomputed = native.generate(ids, max_tokens=12, temperature=0, ignore_eos=True, cache="none")
    reference = ref.generate(ids, max_tokens=12, temperature=0, ignore_eos=True)
    assert cached.ids == recomputed.ids == reference.ids


def test_native_engine_batch_equals_alone(tmp_path):
    path, _, _ = both_ways(tmp_path, "Q5_1")
    llm = LLM(path)
    prompts = [[5, 80, 200, 7], [33, 150, 9, 260, 1, 44, 12], [99]]
    alone = [llm.generate(p, max_tokens=8, temperature=0, ignore_eos=True).ids for p in prompts]
    batched = [g.ids for g in llm.generate(prompts, max_tokens=8, temperature=0, ignore_eos=True)]
    assert batched == alone


def test_mixed_formats_in_one_fused_projection(tmp_path):
    model = random_tiny_llama(3, **QUANT_MODEL)
    path = str(tmp_path / "mixed.gguf")
    write_gguf(model, path, quant_types={"attn_v.weight": "Q8_0", "ffn_up.weight": "Q5_0", "weight": "Q4_0"})
    native, ref = load(path, weights="native"), load(path, weights="dequantized")
    qkv = native.model.model.layers[0].self_attn.qkv_proj
    assert [w.fmt for w in qkv.parts] == ["Q4_0", "Q4_0", "Q8_0"]
    with torch.inference_mode():
        assert_close(native.model(IDS), ref.model(IDS))


def _mapped_ranges(path: str) -> list[tuple[int, int]]:
    """Address ranges where this process maps the file (from /proc/self/maps)."""
    import os

    target = os.path.realpath(path)
    ranges = []
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].strip() == target:
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((lo, hi))
    return ranges


def unfused_views_stay_in_the_mmap(loaded) -> int:
    """Asserts every weight that needs no fusing or row reordering (o_proj, down_proj, the embedding) views
    the file's mapping; returns the bytes of quantized data held outside it (the fused copies)."""
    ranges = _mapped_ranges(loaded.path)
    assert ranges, "the file is not memory-mapped"
    model = loaded.model
    views = [model.model.embed_tokens.weight] + [
        w for layer in model.model.layers for w in layer.self_attn.o_proj.parts + layer.mlp.down_proj.parts
    ]
    for w in views:
        assert any(lo <= w.data.data_ptr() and w.data.data_ptr() + w.data.numel() <= hi for lo, hi in ranges)
    inside = {id(w) for w in views}
    return sum(w.data.numel() for w in quant_weights(model) if id(w) not in inside)


def test_quantized_tensors_view_the_mmap(tmp_path):
    path, native, _ = both_ways(tmp_path, "Q4_1", tied=True)
    copied = unfused_views_stay_in_the_mmap(native)
    c = native.config
    fused_rows = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim + 2 * c.intermediate_size
    assert copied == c.num_layers * fused_rows * c.hidden_size // 32 * 20  # exactly the fused Q4_1 rows


@pytest.mark.slow
def test_default_model_holds_its_blocks_not_floats():
    loaded = load(None, weights="native")
    copied = unfused_views_stay_in_the_mmap(loaded)
    c = loaded.config
    float32_bytes = 4 * sum(w.shape[0] * w.shape[1] for w in quant_weights(loaded.model))
    floats = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    assert floats < 1 << 20  # norms only
    assert copied + floats < float32_bytes / 8  # the fused copies: 4.5-bit rows, never float32
    assert c.tie_word_embeddings and loaded.model.lm_head.parts[0] is loaded.model.model.embed_tokens.weight


@pytest.mark.skipif(native.library() is None, reason="no native kernels on this machine")
def test_with_integer_activations_only_the_embedding_keeps_its_blocks():
    """Every other weight runs on its packed form alone: its blocks (fused copies, file views) are released, and
    reading them again is refused; a model to be sharded keeps them."""
    loaded = load(None, weights="native-int24")
    embedding = loaded.model.model.embed_tokens.weight
    others = [w for w in quant_weights(loaded.model) if w is not embedding]
    assert others and all(w.data.is_meta and w.int8_activations for w in others) and not embedding.data.is_meta
    with pytest.raises(ValueError, match=r"runs on its packed form only: its blocks were released"):
        dequantize_rows(native.library(), others[0], 0, 1)
    kept = load(None, weights="native-int24", keep_blocks=True)
    assert not any(w.data.is_meta for w in quant_weights(kept.model))


@pytest.mark.skipif(native.library() is None, reason="no native kernels on this machine")
def test_fused_projections_packed_from_their_parts_equal_the_stacked_blocks_packed(monkeypatch):
    """With integer activations the fused q/k/v and gate/up weights are packed straight from the file's parts
    (no stacked copy of their blocks): byte for byte the packed form of the stacked blocks that a model kept
    for sharding packs, every weight of the model."""
    lib = native.library()
    from_parts = []
    pack_parts = native.pack_parts

    def counted(lib, parts):  # the loader's calls, and what each gave
        from_parts.append(pack_parts(lib, parts))
        return from_parts[-1]

    monkeypatch.setattr(native, "pack_parts", counted)
    released = quant_weights(load(None, weights="native-int24").model)
    assert len(from_parts) == 60 and all(w is not None for w in from_parts)  # 30 layers' qkv and gate/up
    assert sum(any(w is p for p in from_parts) for w in released) == 60
    kept = quant_weights(load(None, weights="native-int24", keep_blocks=True).model)
    assert len(from_parts) == 60  # a model kept for sharding stacks its blocks
    assert [w.shape for w in released] == [w.shape for w in kept]
    for a, b in zip(released, kept):
        assert torch.equal(native.packed(lib, a), native.packed(lib, b))


@pytest.fixture(scope="module")
def default_pair():
    return LLM(weights="native"), LLM(weights="dequantized")


@pytest.mark.slow
def test_default_model_native_logits_equal_dequantized(default_pair):
    from test_llama_vs_transformers import PROMPTS

    native, ref = default_pair
    for text in PROMPTS + ["héllo wörld 🙂 — 東京 12345"]:
        ids = torch.tensor([native.tokenizer.encode(text)])  # [1, T]
        with torch.inference_mode():
            assert (native.model(ids) - ref.model(ids)).abs().max() <= 1e-4


@pytest.mark.slow
def test_default_model_native_greedy_ids_equal_dequantized(default_pair):
    from test_llama_vs_transformers import PROMPTS

    native, ref = default_pair
    for text in PROMPTS:
        a = native.generate(text, max_tokens=64, temperature=0, ignore_eos=True)
        b = ref.generate(text, max_tokens=64, temperature=0, ignore_eos=True)
        assert a.ids == b.ids and len(a.ids) == 64
