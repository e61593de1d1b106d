"""The layer plan built from the family table and a config: per-layer windows, rotary tables, scales and
soft-caps, the family's fixed traits, and the checks on hand-made plans."""

import json
from dataclasses import replace

import pytest

from helpers.tiny_models import tiny_config, tiny_llama
from tinyllm.loading.hf_config import config_from_hf
from tinyllm.model.llama import LlamaForCausalLM
from tinyllm.model.plan import LayerPlan, ModelPlan, model_plan

GEMMA = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=128,
    sliding_window=4,
)


def hf_plan(tmp_path, **raw) -> ModelPlan:
    (tmp_path / "config.json").write_text(json.dumps({**GEMMA, **raw}))
    return model_plan(config_from_hf(str(tmp_path)))


def test_gemma2_alternates_sliding_and_full_layers_with_its_soft_caps(tmp_path):
    plan = hf_plan(
        tmp_path,
        model_type="gemma2",
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        query_pre_attn_scalar=16,
    )
    assert [p.window for p in plan.layers] == [4, None, 4, None]  # even layers slide, odd ones see everything
    assert {p.attn_softcap for p in plan.layers} == {50.0} and plan.final_softcap == 30.0
    assert {p.attn_scale for p in plan.layers} == {0.25}
    assert {p.rope for p in plan.layers} == {"full"}  # no base of their own: the sliding layers share the table
    assert plan.rope_tables == ("full",)
    assert {(p.norm, p.activation, p.block, p.qkv_bias, p.qk_norm) for p in plan.layers} == {
        ("rms_plus_one", "gelu_tanh", "sandwich", False, False)
    }
    assert plan.final_norm == "rms_plus_one" and plan.embed_scale == 32**0.5


def test_gemma3_sliding_layers_read_their_own_rotary_table(tmp_path):
    plan = hf_plan(
        tmp_path, model_type="gemma3_text", rope_theta=1e6, rope_local_base_freq=1e4, sliding_window_pattern=2
    )
    assert [p.rope for p in plan.layers] == ["sliding", "full"] * 2
    assert [p.window for p in plan.layers] == [4, None] * 2
    assert plan.rope_tables == ("full", "sliding")
    assert all(p.qk_norm and p.attn_softcap is None for p in plan.layers) and plan.final_softcap is None


@pytest.mark.parametrize(
    "family, overrides, qkv_bias",
    [("llama", {}, False), ("llama", dict(attention_bias=True), True), ("qwen2", {}, True)],
)
def test_biases_come_from_the_family_or_the_config(family, overrides, qkv_bias):
    plan = model_plan(tiny_config(family=family, **overrides))
    assert {p.qkv_bias for p in plan.layers} == {qkv_bias}


def test_a_plain_llama_is_the_default_plan():
    plan = model_plan(tiny_config())
    assert plan == ModelPlan(layers=(LayerPlan(),) * 3)
    assert plan.layers[0].attention.scale is None and plan.rope_tables == ("full",)


def test_the_model_is_built_from_its_plan():
    model = tiny_llama(
        0, family="gemma2", sliding_window=4, layer_kinds=("sliding", "full", "sliding"), attn_softcap=3.0
    )
    assert model.plan == model_plan(model.config)
    assert [layer.self_attn.spec for layer in model.model.layers] == [p.attention for p in model.plan.layers]
    assert all(hasattr(layer, "post_feedforward_layernorm") for layer in model.model.layers)


def test_a_model_runs_the_plan_it_is_given():
    plan = model_plan(tiny_config())
    plan = replace(plan, layers=(plan.layers[0], replace(plan.layers[1], attn_softcap=2.0), plan.layers[2]))
    model = tiny_llama(0, plan=plan)
    assert model.plan is plan
    assert [layer.self_attn.spec.softcap for layer in model.model.layers] == [None, 2.0, None]
    with pytest.raises(ValueError, match="must hold 3 layers, got 2"):
        LlamaForCausalLM(tiny_config(), ModelPlan(layers=(LayerPlan(),) * 2))
    with pytest.raises(ValueError, match="local_rope_theta is None"):
        LlamaForCausalLM(tiny_config(), ModelPlan(layers=(LayerPlan(rope="sliding"),) * 3))


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(norm="layer"), "norm must be one of rms, rms_plus_one, got 'layer'"),
        (dict(rope="local"), "rope must be one of full, sliding, got 'local'"),
        (dict(window=0), "window must be positive or None, got 0"),
        (dict(attn_softcap=-1.0), "attn_softcap must be positive or None, got -1.0"),
    ],
)
def test_a_bad_layer_plan_names_the_value(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        LayerPlan(**fields)
