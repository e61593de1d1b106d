"""The layer plan: what each decoder layer computes and what the model computes around the layers, built by one
function (`model_plan`) from the family table and the config. Both executors read it, the torch modules
(llama.py) and the native step (native/lowering.py); neither reads a family feature anywhere else.

A layer: its norm kind, activation and block layout, q/k/v biases, per-head q/k norms, which rotary table it
reads ("full": rope_theta and the scaling; "sliding": the sliding layers' own base), its window, and the scale
and soft-cap of its attention logits, its sinks and output bias, and its MLP (activation, the clamped SwiGLU's
limit and gain): dense, or a mixture of experts (router kind, top-k, renormalisation, router and expert biases).
The model: the embedding scale, the final norm and the final soft-cap.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ModelConfig
from .family import ACTIVATIONS, BLOCK_KINDS, FAMILIES, NORM_KINDS, ROUTERS
from .sdpa import AttentionSpec

ROPE_TABLES = ("full", "sliding")


def _check_kind(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


def _check_positive(name: str, value) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{name} must be positive or None, got {value!r}")


@dataclass(frozen=True)
class MoEPlan:
    """A mixture-of-experts MLP: a router picks top_k of num_experts gated MLPs per token, and the token's
    output is their outputs weighted by the router's probabilities (renormalised over the chosen where
    `renormalize`). Ties between equal probabilities go to the lower expert index."""

    num_experts: int
    top_k: int
    router: str = "softmax"  # a ROUTERS entry
    renormalize: bool = False
    router_bias: bool = False  # the router's logits plus a bias per expert
    expert_bias: bool = False  # the experts' gate/up and down projections carry biases
    shared_expert: bool = False  # an always-on expert beside the routed ones (Qwen2-MoE); none is built yet

    def __post_init__(self):
        _check_kind("router", self.router, ROUTERS)
        if not 0 < self.top_k <= self.num_experts:
            raise ValueError(f"top_k must be in [1, num_experts={self.num_experts}], got {self.top_k}")
        if self.shared_expert:
            raise ValueError("shared_expert must be False: a shared expert is not supported yet")


@dataclass(frozen=True)
class LayerPlan:
    """One decoder layer; the defaults are a plain Llama layer."""

    norm: str = "rms"  # a NORM_KINDS entry, for every norm of the layer (q/k norms included)
    activation: str = "silu"  # of the gated MLP
    block: str = "pre_norm"  # a BLOCK_KINDS entry
    qkv_bias: bool = False
    qk_norm: bool = False  # per-head norms of q and k before rotation
    rope: str = "full"  # which rotary table: a ROPE_TABLES entry
    window: int | None = None  # positions a query sees, its own included; None = all earlier ones
    attn_scale: float | None = None  # multiplies q·k; None = 1/sqrt(head_dim)
    attn_softcap: float | None = None  # attention logits become cap·tanh(logit/cap); None = none
    moe: MoEPlan | None = None  # the MLP: a mixture of experts, or None for the dense gated MLP
    o_bias: bool = False  # the attention's output projection carries a bias
    sinks: bool = False  # a learned logit per head joins each softmax's denominator (and takes no value)
    activation_limit: float | None = None  # clamped_swiglu: gate clamped above, up on both sides, at this
    activation_alpha: float | None = None  # clamped_swiglu: the sigmoid's gain

    def __post_init__(self):
        _check_kind("norm", self.norm, NORM_KINDS)
        _check_kind("activation", self.activation, ACTIVATIONS)
        clamped = self.activation == "clamped_swiglu"
        for name in ("activation_limit", "activation_alpha"):
            value = getattr(self, name)
            _check_positive(name, value)
            if (value is None) == clamped:
                raise ValueError(f"{name} must be given for clamped_swiglu alone, got {value!r} for {self.activation}")
        _check_kind("block", self.block, BLOCK_KINDS)
        _check_kind("rope", self.rope, ROPE_TABLES)
        for name in ("window", "attn_scale", "attn_softcap"):
            _check_positive(name, getattr(self, name))

    @property
    def attention(self) -> AttentionSpec:
        return AttentionSpec(self.attn_scale, self.attn_softcap, self.window)


PLAIN_LAYER = LayerPlan()


@dataclass(frozen=True)
class ModelPlan:
    """The layers in order, and what runs before and after them."""

    layers: tuple[LayerPlan, ...]
    embed_scale: float | None = None  # embeddings times this (rounded to the compute dtype first); None = none
    final_norm: str = "rms"  # a NORM_KINDS entry
    final_softcap: float | None = None  # output logits become cap·tanh(logit/cap); None = none

    def __post_init__(self):
        _check_kind("final_norm", self.final_norm, NORM_KINDS)
        for name in ("embed_scale", "final_softcap"):
            _check_positive(name, getattr(self, name))

    @property
    def rope_tables(self) -> tuple[str, ...]:
        """The rotary tables the layers read, in ROPE_TABLES order."""
        return tuple(t for t in ROPE_TABLES if any(layer.rope == t for layer in self.layers))


def layer_plan(config: ModelConfig, layer: int) -> LayerPlan:
    """Layer `layer` of a model of this config: the family's fixed traits and the config's options."""
    family = FAMILIES[config.family]
    own_rope = config.layer_kind(layer) == "sliding" and config.local_rope_theta is not None
    clamped = family.activation == "clamped_swiglu"
    limit = family.swiglu_limit if config.swiglu_limit is None else config.swiglu_limit
    alpha = family.swiglu_alpha if config.swiglu_alpha is None else config.swiglu_alpha
    return LayerPlan(
        norm=family.norm,
        activation=family.activation,
        block=family.block,
        qkv_bias=family.qkv_bias or config.attention_bias,
        qk_norm=family.qk_norm,
        rope="sliding" if own_rope else "full",
        window=config.layer_window(layer),
        attn_scale=config.query_scale,
        attn_softcap=config.attn_softcap,
        moe=_moe_plan(config, layer),
        o_bias=family.o_bias,
        sinks=family.attn_sinks,
        activation_limit=limit if clamped else None,
        activation_alpha=alpha if clamped else None,
    )


def _moe_plan(config: ModelConfig, layer: int) -> MoEPlan | None:
    experts, family = config.experts, FAMILIES[config.family]
    if not config.has_experts(layer):
        return None
    if family.router is None:
        raise ValueError(f"the {config.family} family has no experts, but the config gives {experts.num_experts}")
    return MoEPlan(
        experts.num_experts,
        experts.top_k,
        family.router,
        experts.renormalize,
        router_bias=family.router_bias,
        expert_bias=family.expert_bias,
    )


def model_plan(config: ModelConfig) -> ModelPlan:
    """The whole model's plan, from FAMILIES[config.family] and the config."""
    family = FAMILIES[config.family]
    return ModelPlan(
        layers=tuple(layer_plan(config, i) for i in range(config.num_layers)),
        embed_scale=config.hidden_size**0.5 if family.embed_scale else None,
        final_norm=family.norm,
        final_softcap=config.final_softcap,
    )
