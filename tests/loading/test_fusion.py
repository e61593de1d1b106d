"""Fusing q/k/v and gate/up from files whose parts have different types: llama.cpp's Q3_K_M and Q2_K files put
a Q3_K or Q2_K attn_q (expanded to float at load) beside a Q4_K or Q6_K attn_v. Such a group is fused as float,
the other projections stay blocks, and the model equals the file's dequantized float model."""

import pytest
import torch

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm.cache.kv_cache import KVCache
from tinyllm.loading.fusion import fuse
from tinyllm.loading.loader import load
from tinyllm.model.native.lowering import unsupported
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
    return path, reference.eval()


def logits(model, cached: bool) -> torch.Tensor:
    """Logits of every position: fed 4 tokens, then one at a time (a cache), or all recomputed each time."""
    c = model.config
    kv = KVCache(c.num_layers, c.num_kv_heads, c.head_dim, 64) if cached else None
    seq = SequenceState(model, kv)
    rows = [seq.feed(IDS[:4], rows="all")]
    rows += [seq.feed([i], rows="all") for i in IDS[4:]]
    return torch.cat(rows)  # [T, V]


def test_a_mixed_group_is_fused_as_float_and_the_rest_stays_blocks(files):
    model = load(files[0]).model
    layer = model.model.layers[0]
    assert isinstance(layer.self_attn.qkv_proj.weight, torch.Tensor)
    assert type(model.lm_head) is QuantLinear and [w.fmt for w in model.lm_head.parts] == ["Q6_K"]
    # The native step covers quantized projections only: it declines, and the module path runs the model.
    assert "not quantized" in unsupported(model)


def test_it_equals_the_dequantized_float_model_cached_and_recomputed(files):
    path, reference = files
    model = load(path).model
    expected = logits(reference, cached=False)
    assert close(logits(model, cached=False), expected)
    assert close(logits(model, cached=True), logits(model, cached=False))


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float32 summation order, relative to the logits' scale (random K-blocks make them ~100)."""
    return bool((a - b).abs().max() <= 1e-5 * b.abs().max())
