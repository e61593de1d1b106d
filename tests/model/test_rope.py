"""Rotary tables (model/rope.py) against transformers' own: YaRN's frequencies and attention factor, read from a
config's rope_parameters as the HF loader reads them (loading/hf_config.py), for gpt-oss's settings and for
the other ways a config may give them (the ramp truncated or not, an attention factor given, DeepSeek's mscales)."""

import pytest
import torch

from tinyllm.loading.hf_config import rope_scaling_from
from tinyllm.model.rope import RotaryEmbedding

GPT_OSS = dict(factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False, original_max_position_embeddings=4096)
CASES = {
    "gpt-oss": (64, 150000.0, 131072, GPT_OSS),
    "truncated": (16, 10000.0, 256, dict(factor=4.0, original_max_position_embeddings=64)),
    "narrow-ramp": (
        32,
        500000.0,
        2048,
        dict(factor=8.0, beta_fast=4.0, beta_slow=2.0, original_max_position_embeddings=256),
    ),
    "attention-factor": (16, 10000.0, 256, dict(factor=4.0, attention_factor=0.8, original_max_position_embeddings=64)),
    "mscales": (
        16,
        10000.0,
        512,
        dict(factor=8.0, mscale=1.0, mscale_all_dim=0.5, original_max_position_embeddings=64),
    ),
}


def transformers_tables(head_dim: int, theta: float, max_positions: int, params: dict, positions: torch.Tensor):
    """transformers' inv_freq, attention factor and cos, sin [T, R] for a Llama of these rope parameters."""
    import transformers as tf
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    rope = dict(params, rope_type="yarn", rope_theta=theta)
    config = tf.LlamaConfig(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=max_positions,
        rope_parameters=rope,
    )
    rotary = LlamaRotaryEmbedding(config)
    cos, sin = rotary(torch.zeros(1), positions[None])  # [1, T, R] each
    return rotary.inv_freq, rotary.attention_scaling, cos[0], sin[0]


@pytest.mark.parametrize("case", list(CASES))
def test_yarn_tables_equal_transformers(case):
    head_dim, theta, max_positions, params = CASES[case]
    positions = torch.tensor([0, 1, 7, 63, 64, 65, 1000, max_positions - 1])
    inv_freq, factor, cos, sin = transformers_tables(head_dim, theta, max_positions, params, positions)
    scaling = rope_scaling_from(dict(params, rope_type="yarn"), "config.json", max_positions)
    ours = RotaryEmbedding(head_dim, theta, scaling)
    assert torch.equal(ours.inv_freq, inv_freq)
    assert ours.attention_factor == pytest.approx(factor, rel=1e-12) and factor != 1.0
    our_cos, our_sin = ours.cos_sin(positions, torch.float32)  # [T, R], sin's first half negated
    half = head_dim // 2
    assert torch.equal(our_cos, cos)
    assert torch.equal(our_sin[:, half:], sin[:, half:]) and torch.equal(our_sin[:, :half], -sin[:, :half])


def test_yarn_stretches_the_slow_dims_and_keeps_the_fast_ones():
    """The ramp's two ends: the first (fastest) dims keep theta^(-2i/R), the last are divided by the factor."""
    head_dim, theta, _, params = CASES["gpt-oss"]
    plain = RotaryEmbedding(head_dim, theta).inv_freq
    yarn = RotaryEmbedding(head_dim, theta, rope_scaling_from(dict(params, rope_type="yarn"), "config.json"))
    assert torch.allclose(yarn.inv_freq[:4], plain[:4], rtol=1e-6)
    assert torch.allclose(yarn.inv_freq[-4:], plain[-4:] / 32.0, rtol=1e-6)


def test_yarn_without_an_original_context_takes_the_configs_as_transformers_does():
    """transformers fills original_max_position_embeddings with max_position_embeddings where a config omits it."""
    positions = torch.arange(8)
    inv_freq, factor, _, _ = transformers_tables(16, 10000.0, 1000, dict(factor=4.0), positions)
    scaling = rope_scaling_from(dict(rope_type="yarn", factor=4.0), "config.json", 1000)
    assert scaling.original_max_position_embeddings == 1000
    ours = RotaryEmbedding(16, 10000.0, scaling)
    assert torch.equal(ours.inv_freq, inv_freq) and ours.attention_factor == pytest.approx(factor, rel=1e-12)
