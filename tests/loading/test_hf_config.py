"""config.json in both transformers layouts (rope_scaling + rope_theta, or rope_parameters, one per layer
kind) gives the same ModelConfig; windows, scales and soft-caps are read from their keys."""

import json

import pytest

from tinyllm.config import ExpertConfig, RopeScaling
from tinyllm.loading.hf_config import config_from_hf

BASE = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-6,
)


def load(tmp_path, **raw):
    (tmp_path / "config.json").write_text(json.dumps({**BASE, **raw}))
    return config_from_hf(str(tmp_path))


def test_llama3_rope_scaling_in_both_layouts(tmp_path):
    scaling = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)
    old = load(tmp_path, model_type="llama", rope_theta=5e5, rope_scaling={"rope_type": "llama3", **scaling})
    new = load(tmp_path, model_type="llama", rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, **scaling})
    assert old == new
    assert new.rope_scaling == RopeScaling("llama3", 8.0, 1.0, 4.0, 64) and new.rope_theta == 5e5


def test_gemma3_in_both_layouts(tmp_path):
    common = dict(model_type="gemma3_text", head_dim=16, sliding_window=4, query_pre_attn_scalar=16)
    old = load(
        tmp_path,
        **common,
        rope_theta=1e6,
        rope_local_base_freq=1e4,
        rope_scaling={"rope_type": "linear", "factor": 8.0},
        sliding_window_pattern=3,
    )
    layer_types = ["sliding_attention", "sliding_attention", "full_attention"] * 2
    rope = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
    }
    new = load(tmp_path, **common, rope_parameters=rope, layer_types=layer_types)
    assert old == new
    assert new.family == "gemma3" and new.local_rope_theta == 1e4 and new.rope_scaling == RopeScaling("linear", 8.0)
    assert [new.layer_window(i) for i in range(6)] == [4, 4, None, 4, 4, None]
    assert new.query_scale == pytest.approx(0.25)


def test_gemma2_legacy_config_alternates_from_a_sliding_first_layer(tmp_path):
    c = load(tmp_path, model_type="gemma2", head_dim=8, sliding_window=4, attn_logit_softcapping=50.0)
    assert c.layer_kinds == ("sliding", "full") * 3 and c.attn_softcap == 50.0 and c.final_softcap is None


def test_windows_apply_to_every_layer_or_none(tmp_path):
    assert load(tmp_path, model_type="mistral", sliding_window=16).layer_kinds == ("sliding",) * 6
    assert load(tmp_path, model_type="mistral", sliding_window=None).sliding_window is None
    qwen = load(tmp_path, model_type="qwen2", sliding_window=32, use_sliding_window=False)
    assert qwen.sliding_window is None and qwen.layer_window(0) is None
    assert load(tmp_path, model_type="phi3", sliding_window=8, partial_rotary_factor=0.5).rotary_dim == 4


def test_experts_from_the_hubs_qwen3_moe_keys(tmp_path):
    """Qwen3-30B-A3B's config.json names num_experts (transformers 5 writes num_local_experts); layers listed in
    mlp_only_layers or off the decoder_sparse_step keep a dense MLP."""
    moe = dict(model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16)
    c = load(tmp_path, **moe, norm_topk_prob=True, decoder_sparse_step=2, mlp_only_layers=[3])
    assert c.experts == ExpertConfig(8, 2, 16, renormalize=True, dense_layers=(0, 2, 3, 4))
    assert [c.has_experts(i) for i in range(6)] == [False, True, False, False, False, True]
    assert load(tmp_path, **moe).experts == ExpertConfig(8, 2, 16)  # norm_topk_prob absent: False, as transformers
    assert load(tmp_path, **{**moe, "num_experts": 0}).experts is None  # transformers builds dense MLPs then
    assert load(tmp_path, **{**moe, "model_type": "qwen3"}).experts is None  # a dense family has none
