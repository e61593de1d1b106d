"""What a loaded model does beyond a plain Llama, in words, for `tinyllm info`: its plan's layer and model
features (model/plan.py) and the rotary tables' options of its config; and the parameters a token leaves unread
in a mixture of experts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ..config import ModelConfig
from .plan import LayerPlan, ModelPlan, MoEPlan, model_plan

# (text, a layer's value): the text, formatted with the value, for each value other than None or False
_LAYER_TRAITS: tuple[tuple[str, Callable[[LayerPlan], object]], ...] = (
    ("norm (1 + w)", lambda p: p.norm == "rms_plus_one"),
    ("GeGLU (tanh GELU)", lambda p: p.activation == "gelu_tanh"),
    ("pre- and post-norms", lambda p: p.block == "sandwich"),
    ("q/k norms", lambda p: p.qk_norm),
    ("clamped SwiGLU (limit {:g})", lambda p: p.activation_limit),
    ("attention sinks", lambda p: p.sinks),
    ("attention output bias", lambda p: p.o_bias),
)


def _experts(moe: MoEPlan | None) -> str | None:
    if moe is None:
        return None
    renormalised = ", renormalised" if moe.renormalize else ""
    biases = ", biases" if moe.router_bias or moe.expert_bias else ""
    return f"mixture of experts: top {moe.top_k} of {moe.num_experts} ({moe.router} router{renormalised}{biases})"


def idle_expert_parameters(c: ModelConfig) -> int:
    """Parameters a token does not read: the gate, up and down weights (and biases) of the experts it is not
    routed to, in every layer with experts (total minus this = the active parameters)."""
    if c.experts is None:
        return 0
    C, I = c.hidden_size, c.experts.intermediate_size  # noqa: E741

    def per_expert(moe: MoEPlan) -> int:
        return 3 * C * I + (2 * I + C if moe.expert_bias else 0)

    return sum((p.moe.num_experts - p.moe.top_k) * per_expert(p.moe) for p in model_plan(c).layers if p.moe)


def _per_layer(plan: ModelPlan, text: str, value: Callable[[LayerPlan], object], count_all: bool = False) -> list:
    """text for each value the layers have, with how many layers have it unless all do (or count_all)."""
    total = len(plan.layers)
    counts = Counter(value(p) for p in plan.layers)
    return [
        text.format(v) + (f" on {n} of {total} layers" if count_all or n < total else "")
        for v, n in counts.items()
        if v is not None and v is not False
    ]


def _rotary(c: ModelConfig) -> list[str]:
    features = []
    if c.rope_scaling is not None:
        features.append(f"rope scaling {c.rope_scaling.kind} x{c.rope_scaling.factor:g}")
    if c.rope_freq_factors is not None:
        features.append("rope frequency factors")
    if c.rotary_dim != c.head_dim:
        features.append(f"partial rotary ({c.rotary_dim} of {c.head_dim} dims)")
    return features


def model_features(c: ModelConfig) -> list[str]:
    plan = model_plan(c)
    features = [f for text, value in _LAYER_TRAITS for f in _per_layer(plan, text, value)]
    features += _per_layer(plan, "{}", lambda p: _experts(p.moe))
    if plan.embed_scale is not None:
        features.append("embeddings scaled by sqrt(hidden)")
    features += _per_layer(plan, "q/k/v biases", lambda p: p.qkv_bias)
    features += _rotary(c)
    features += _per_layer(plan, "sliding window {}", lambda p: p.window, count_all=True)
    if c.local_rope_theta is not None:
        features.append(f"sliding layers' rope base {c.local_rope_theta:g}")
    features += _per_layer(plan, "query scale {:.6g}", lambda p: p.attn_scale)
    features += _per_layer(plan, "attention logit soft-cap {:g}", lambda p: p.attn_softcap)
    if plan.final_softcap is not None:
        features.append(f"final logit soft-cap {plan.final_softcap:g}")
    return features
