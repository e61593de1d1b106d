"""What a loaded model does beyond a plain Llama, in words, for `tinyllm info`: the family's fixed traits
and the options its config switched on."""

from __future__ import annotations

from ..config import ModelConfig
from .family import FAMILIES


def model_features(c: ModelConfig) -> list[str]:
    features = FAMILIES[c.family].features()
    if c.attention_bias:
        features.append("q/k/v biases")
    if c.rope_scaling is not None:
        features.append(f"rope scaling {c.rope_scaling.kind} x{c.rope_scaling.factor:g}")
    if c.rope_freq_factors is not None:
        features.append("rope frequency factors")
    if c.rotary_dim != c.head_dim:
        features.append(f"partial rotary ({c.rotary_dim} of {c.head_dim} dims)")
    num_sliding = sum(c.layer_window(i) is not None for i in range(c.num_layers))
    if num_sliding:
        features.append(f"sliding window {c.sliding_window} on {num_sliding} of {c.num_layers} layers")
    if c.local_rope_theta is not None:
        features.append(f"sliding layers' rope base {c.local_rope_theta:g}")
    if c.query_scale is not None:
        features.append(f"query scale {c.query_scale:.6g}")
    for name, cap in (("attention", c.attn_softcap), ("final", c.final_softcap)):
        if cap is not None:
            features.append(f"{name} logit soft-cap {cap:g}")
    return features
