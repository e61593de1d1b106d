"""Model families as data: what makes each decoder differ from Llama, in one frozen description each.

The layer plan (plan.py) and the loaders read these fields; no forward branches on a family's name. What a
config may switch on or off within a family (biases, windows, softcaps, rope scaling) lives in
ModelConfig; what every model of the family shares lives here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TinyLLMError

NORM_KINDS = ("rms", "rms_plus_one")  # weight·x̂, or (1 + weight)·x̂ (Gemma)
ACTIVATIONS = ("silu", "gelu_tanh", "clamped_swiglu")  # clamped_swiglu: gpt-oss's (mlp.py)
BLOCK_KINDS = ("pre_norm", "sandwich")  # sandwich: norms before and after attention and MLP (Gemma 2/3)
# How a token picks its experts: "softmax": softmax over all experts, then the top k (Qwen3-MoE); "softmax_topk":
# the top k logits, then softmax over those alone (gpt-oss)
ROUTERS = ("softmax", "softmax_topk")


@dataclass(frozen=True)
class Family:
    name: str
    hf_model_types: tuple[str, ...]  # config.json model_type values
    gguf_architecture: str | None  # general.architecture of llama.cpp's files; None = none of its own
    norm: str = "rms"
    activation: str = "silu"
    block: str = "pre_norm"
    qkv_bias: bool = False  # every model of the family has q/k/v biases (Qwen2)
    qk_norm: bool = False  # per-head RMSNorm of q and k before rotation (Qwen3, Gemma 3)
    embed_scale: bool = False  # embeddings multiplied by sqrt(hidden_size)
    fused_hf_names: bool = False  # the HF checkpoint already holds qkv_proj and gate_up_proj (Phi-3)
    gguf_rope_permuted: bool = False  # llama.cpp reorders Q/K rows for its interleaved rotation
    gguf_norm_shift: float = 0.0  # llama.cpp stores norm weights plus this (Gemma: 1)
    sliding_pattern: int | None = None  # every n-th layer full, the rest sliding, where the source says no more
    gguf_local_rope_theta: float | None = None  # sliding layers' base when the file does not give one
    gguf_tensors: tuple[tuple[str, str], ...] = ()  # extra or overriding GGUF -> our names
    router: str | None = None  # a ROUTERS entry where the family's configs may have experts; None = dense only
    gguf_renormalize: bool = False  # llama.cpp renormalises the chosen experts' weights, where the file says not
    router_bias: bool = False  # the router and the experts' projections carry biases (gpt-oss)
    expert_bias: bool = False
    o_bias: bool = False  # the attention's output projection carries a bias (gpt-oss)
    attn_sinks: bool = False  # a learned logit per head in each softmax's denominator (gpt-oss)
    swiglu_limit: float | None = None  # clamped_swiglu's clamp and sigmoid gain where the source gives none
    swiglu_alpha: float | None = None
    gguf_yarn_truncate: bool = True  # YaRN's ramp ends rounded to whole dims, which llama.cpp's files do not say
    hf_tensors: tuple[tuple[str, str, str], ...] = ()  # HF name -> ours, and its layout (loading/hf_tensors.py)

    def __post_init__(self):
        for name, value, allowed in (
            ("norm", self.norm, NORM_KINDS),
            ("activation", self.activation, ACTIVATIONS),
            ("block", self.block, BLOCK_KINDS),
            ("router", self.router, (None, *ROUTERS)),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


_QKV_BIAS = (
    ("blk.{i}.attn_q.bias", "model.layers.{i}.self_attn.q_proj.bias"),
    ("blk.{i}.attn_k.bias", "model.layers.{i}.self_attn.k_proj.bias"),
    ("blk.{i}.attn_v.bias", "model.layers.{i}.self_attn.v_proj.bias"),
)
_QK_NORM = (
    ("blk.{i}.attn_q_norm.weight", "model.layers.{i}.self_attn.q_norm.weight"),
    ("blk.{i}.attn_k_norm.weight", "model.layers.{i}.self_attn.k_norm.weight"),
)
_SANDWICH = (
    ("blk.{i}.post_attention_norm.weight", "model.layers.{i}.post_attention_layernorm.weight"),
    ("blk.{i}.ffn_norm.weight", "model.layers.{i}.pre_feedforward_layernorm.weight"),
    ("blk.{i}.post_ffw_norm.weight", "model.layers.{i}.post_feedforward_layernorm.weight"),
)
# A tensor whose target holds "{e}" stacks the experts: [E, N, K] in the file, one [N, K] weight per expert.
_EXPERTS = (
    ("blk.{i}.ffn_gate_inp.weight", "model.layers.{i}.mlp.gate.weight"),
    ("blk.{i}.ffn_gate_exps.weight", "model.layers.{i}.mlp.experts.{e}.gate_proj.weight"),
    ("blk.{i}.ffn_up_exps.weight", "model.layers.{i}.mlp.experts.{e}.up_proj.weight"),
    ("blk.{i}.ffn_down_exps.weight", "model.layers.{i}.mlp.experts.{e}.down_proj.weight"),
)
_GPT_OSS_GGUF = (
    ("blk.{i}.attn_output.bias", "model.layers.{i}.self_attn.o_proj.bias"),
    ("blk.{i}.attn_sinks.weight", "model.layers.{i}.self_attn.sinks"),
    ("blk.{i}.post_attention_norm.weight", "model.layers.{i}.post_attention_layernorm.weight"),
    ("blk.{i}.ffn_gate_inp.bias", "model.layers.{i}.mlp.gate.bias"),
    ("blk.{i}.ffn_gate_exps.bias", "model.layers.{i}.mlp.experts.{e}.gate_proj.bias"),
    ("blk.{i}.ffn_up_exps.bias", "model.layers.{i}.mlp.experts.{e}.up_proj.bias"),
    ("blk.{i}.ffn_down_exps.bias", "model.layers.{i}.mlp.experts.{e}.down_proj.bias"),
)
# gpt-oss's checkpoints name the router `router` and stack each layer's experts: [E, C, 2I] with gate and up
# alternating along 2I, [E, I, C] for down, [E, 2I] and [E, C] for the biases (layouts: loading/hf_tensors.py)
_P = "model.layers.{i}.mlp."
_GPT_OSS_HF = (
    (_P + "router.weight", _P + "gate.weight", "whole"),
    (_P + "router.bias", _P + "gate.bias", "whole"),
    (_P + "experts.gate_up_proj", _P + "experts.{e}.gate_proj.weight", "in_out_even"),
    (_P + "experts.gate_up_proj", _P + "experts.{e}.up_proj.weight", "in_out_odd"),
    (_P + "experts.gate_up_proj_bias", _P + "experts.{e}.gate_proj.bias", "even"),
    (_P + "experts.gate_up_proj_bias", _P + "experts.{e}.up_proj.bias", "odd"),
    (_P + "experts.down_proj", _P + "experts.{e}.down_proj.weight", "in_out"),
    (_P + "experts.down_proj_bias", _P + "experts.{e}.down_proj.bias", "out"),
)
_GEMMA = dict(norm="rms_plus_one", activation="gelu_tanh", block="sandwich", embed_scale=True, gguf_norm_shift=1.0)

FAMILIES = {
    f.name: f
    for f in (
        Family("llama", ("llama",), "llama", gguf_rope_permuted=True, gguf_tensors=_QKV_BIAS),
        Family("mistral", ("mistral",), None, gguf_rope_permuted=True),
        Family("qwen2", ("qwen2",), "qwen2", qkv_bias=True, gguf_tensors=_QKV_BIAS),
        Family("qwen3", ("qwen3",), "qwen3", qk_norm=True, gguf_tensors=_QK_NORM + _QKV_BIAS),
        Family(
            "qwen3_moe",
            ("qwen3_moe",),
            "qwen3moe",
            qk_norm=True,
            router="softmax",
            gguf_renormalize=True,
            gguf_tensors=_QK_NORM + _QKV_BIAS + _EXPERTS,
        ),
        Family(
            "gpt_oss",
            ("gpt_oss",),
            "gpt-oss",
            activation="clamped_swiglu",
            qkv_bias=True,
            sliding_pattern=2,
            router="softmax_topk",
            router_bias=True,
            expert_bias=True,
            o_bias=True,
            attn_sinks=True,
            swiglu_limit=7.0,
            swiglu_alpha=1.702,
            gguf_yarn_truncate=False,
            gguf_tensors=_QKV_BIAS + _EXPERTS + _GPT_OSS_GGUF,
            hf_tensors=_GPT_OSS_HF,
        ),
        Family("gemma2", ("gemma2",), "gemma2", sliding_pattern=2, gguf_tensors=_SANDWICH, **_GEMMA),
        Family(
            "gemma3",
            ("gemma3_text",),
            "gemma3",
            qk_norm=True,
            sliding_pattern=6,
            gguf_local_rope_theta=10000.0,
            gguf_tensors=_SANDWICH + _QK_NORM,
            **_GEMMA,
        ),
        Family(
            "phi3",
            ("phi3",),
            "phi3",
            fused_hf_names=True,
            gguf_tensors=(
                ("blk.{i}.attn_qkv.weight", "model.layers.{i}.self_attn.qkv_proj.weight"),
                ("blk.{i}.ffn_up.weight", "model.layers.{i}.mlp.gate_up_proj.weight"),
            ),
        ),
    )
}


def family_named(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise TinyLLMError(f"model family {name!r} is not supported, expected one of {', '.join(FAMILIES)}") from None


def family_for_hf(model_type) -> Family:
    for f in FAMILIES.values():
        if model_type in f.hf_model_types:
            return f
    known = ", ".join(t for f in FAMILIES.values() for t in f.hf_model_types)
    raise TinyLLMError(f"model_type {model_type!r} is not supported, expected one of {known}")


def family_for_gguf(architecture: str) -> Family:
    for f in FAMILIES.values():
        if f.gguf_architecture == architecture:
            return f
    known = ", ".join(f.gguf_architecture for f in FAMILIES.values() if f.gguf_architecture)
    raise TinyLLMError(f"GGUF architecture {architecture!r} is not supported, expected one of {known}")
