"""Fusing q/k/v and gate/up from files whose parts have different types, as llama.cpp's quantizer writes them:
a Q3_K_M file's Q3_K parts (kept as Q6_K blocks of the same values) beside Q4_K and Q6_K parts stay blocks, and
both executors run them; a Q2_K file's Q2_K parts (expanded to float at load) beside a Q4_K attn_v make the
group float. Either way the model equals the file's dequantized float model, cached and recomputed."""

import pytest
import torch

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm.cache.kv_cache import KVCache
from tinyllm.cache.paged_cache import PagedStorage
from tinyllm.loading.fusion import fuse
from tinyllm.loading.loader import load
from tinyllm.model.native.lowering import build_stack, decode_logits, unsupported
from tinyllm.model.quant_linear import QuantLinear
from tinyllm.reference import SequenceState

QUANT_MODEL = dict(hidden_size=256, intermediate_size=256, num_heads=4, num_kv_heads=2, head_dim=64)
IDS = [5, 80, 200, 7, 33, 150, 9, 260, 1, 44]
# As llama.cpp's quantizer mixes types in one layer (Q3_K_M: attn_v and ffn_down wider; Q2_K: attn_v Q4_K).
MIXES = {
    "Q3_K_M": {
        "attn_q.weight": "Q3_K",
        "attn_k.weight": "Q4_K",
        "attn_v.weight": "Q6_K",
        "attn_output.weight": "Q4_K",
        "ffn_gate.weight": "Q3_K",
        "ffn_up.weight": "Q4_K",
        "ffn_down.weight": "Q5_K",
        "output.weight": "Q6_K",
    },
    "Q2_K": {
        "attn_q.weight": "Q2_K",
        "attn_k.weight": "Q2_K",
        "attn_v.weight": "Q4_K",
        "attn_output.weight": "Q3_K",
        "ffn_gate.weight": "Q2_K",
        "ffn_up.weight": "Q2_K",
        "ffn_down.weight": "Q3_K",
        "output.weight": "Q6_K",
    },
}


@pytest.fixture(scope="module", params=list(MIXES))
def files(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("mix") / "m.gguf")
    stored = write_gguf(random_tiny_llama(3, **QUANT_MODEL), path, quant_types=MIXES[request.param])
    reference = random_tiny_llama(3, **QUANT_MODEL)
    reference.load_state_dict(fuse(stored), strict=False)
    return path, reference.eval(), request.param


def logits(model, cached: bool) -> torch.Tensor:
    """Logits of every position: fed 4 tokens, then one at a time (a cache), or all recomputed each time."""
    c = model.config
    kv = KVCache(c.num_layers, c.num_kv_heads, c.head_dim, 64) if cached else None
    seq = SequenceState(model, kv)
    rows = [seq.feed(IDS[:4], rows="all")]
    rows += [seq.feed([i], rows="all") for i in IDS[4:]]
    return torch.cat(rows)  # [T, V]


def test_q3_k_parts_stay_blocks_and_a_group_with_a_float_part_is_float(files):
    model = load(files[0]).model
    attn = model.model.layers[0].self_attn
    assert type(model.lm_head) is QuantLinear and [w.fmt for w in model.lm_head.parts] == ["Q6_K"]
    if files[2] == "Q3_K_M":
        assert [w.fmt for w in attn.qkv_proj.parts] == ["Q6_K", "Q4_K", "Q6_K"]
        assert unsupported(model) is None
    else:  # Q2_K has no kernel: its parts are float, and the native step covers quantized projections only
        assert isinstance(attn.qkv_proj.weight, torch.Tensor)
        assert "not quantized" in unsupported(model)


def test_the_native_step_equals_the_module_path_where_it_runs(files):
    path, _, mix = files
    model = load(path).model
    c = model.config
    stack = build_stack(model, PagedStorage(c.num_layers, c.num_kv_heads, c.head_dim, 4, block_size=4))
    if mix == "Q2_K":  # float projections: the module path runs the model
        assert stack is None
        return
    ids = torch.tensor(IDS)
    with torch.inference_mode():
        native = torch.cat(
            [
                decode_logits(
                    model,
                    stack,
                    ids[t : t + 1],
                    torch.tensor([t]),
                    torch.tensor([t]),
                    torch.arange(t + 1)[None],
                    torch.tensor([0]),
                )
                for t in range(len(IDS))
            ]
        )  # [T, V], one token a step over the paged cache
    assert close(native, logits(model, cached=False))


def test_it_equals_the_dequantized_float_model_cached_and_recomputed(files):
    path, reference, _ = files
    model = load(path).model
    expected = logits(reference, cached=False)
    assert close(logits(model, cached=False), expected)
    assert close(logits(model, cached=True), logits(model, cached=False))


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float32 summation order, relative to the logits' scale (random K-blocks make them ~100)."""
    return bool((a - b).abs().max() <= 1e-5 * b.abs().max())
