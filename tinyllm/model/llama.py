"""The decoder every family shares (Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3): wires embedding, blocks,
norm and head. What differs between families is data: the model's plan (model/plan.py, built from the family
table and the config) gives each layer its norm, activation, block layout, biases, q/k norms, rotary table,
AttentionSpec and MLP (dense, or a mixture of experts), and the model its embedding scale, final norm and
final soft-cap.

Parameter names follow Hugging Face's checkpoints, except that q/k/v and gate/up are fused into one
projection each (`qkv_proj`, `gate_up_proj`); the loaders map both HF and GGUF names by tables and
concatenate the fused rows (loading/fusion.py).
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from .attention import GQAttention
from .mlp import GatedMLP
from .moe import MoEMLP
from .norm import NORMS
from .plan import PLAIN_LAYER, LayerPlan, ModelPlan, model_plan
from .rope import RotaryEmbedding
from .sdpa import soft_cap
from .step import CausalStep, ForwardStep


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x)). The attention is GQA unless given."""

    def __init__(self, config, layer_idx: int, plan: LayerPlan = PLAIN_LAYER, attention: nn.Module | None = None):
        super().__init__()
        norm = NORMS[plan.norm]
        self.input_layernorm = norm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = attention or GQAttention(
            config.hidden_size,
            config.num_heads,
            config.num_kv_heads,
            config.head_dim,
            layer_idx,
            bias=plan.qkv_bias,
            qk_norm=norm if plan.qk_norm else None,
            eps=config.rms_norm_eps,
            spec=plan.attention,
            o_bias=plan.o_bias,
            sinks=plan.sinks,
        )
        self.post_attention_layernorm = norm(config.hidden_size, config.rms_norm_eps)
        act = dict(limit=plan.activation_limit, alpha=plan.activation_alpha)  # the clamped SwiGLU's
        if plan.moe is None:
            self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, plan.activation, **act)
        else:
            self.mlp = MoEMLP(config.hidden_size, config.experts.intermediate_size, plan.moe, plan.activation, **act)

    def forward(self, x, cos, sin, step: ForwardStep):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, step)
        return x + self.mlp(self.post_attention_layernorm(x))


class SandwichDecoderLayer(DecoderLayer):
    """Norms on both sides of each sub-layer (Gemma 2/3): x + post(attn(pre(x))), then the same for the MLP.
    Here post_attention_layernorm is the norm after attention, as Gemma's checkpoints name it."""

    def __init__(self, config, layer_idx: int, plan: LayerPlan):
        super().__init__(config, layer_idx, plan)
        norm = NORMS[plan.norm]
        self.pre_feedforward_layernorm = norm(config.hidden_size, config.rms_norm_eps)
        self.post_feedforward_layernorm = norm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, cos, sin, step: ForwardStep):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin, step))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


BLOCKS = {"pre_norm": DecoderLayer, "sandwich": SandwichDecoderLayer}


class LlamaBackbone(nn.Module):
    def __init__(self, config: ModelConfig, plan: ModelPlan):
        super().__init__()
        # Zeros, not nn.Embedding's normal_ init: loaders build on the meta device, where normal_ imports
        # torch's Python decompositions (seconds and tens of MB); every weight is loaded afterwards anyway.
        self.embed_tokens = nn.Embedding(
            config.vocab_size, config.hidden_size, _weight=torch.zeros(config.vocab_size, config.hidden_size)
        )
        self.layers = nn.ModuleList(BLOCKS[p.block](config, i, p) for i, p in enumerate(plan.layers))
        self.norm = NORMS[plan.final_norm](config.hidden_size, config.rms_norm_eps)


def rotary_tables(config: ModelConfig) -> tuple[RotaryEmbedding, RotaryEmbedding | None]:
    """The full layers' rotary (rope_theta and the scaling), and the sliding layers' own (its base,
    unscaled) where the config gives one; None means the sliding layers share the first."""
    full = RotaryEmbedding(config.rotary_dim, config.rope_theta, config.rope_scaling, config.rope_freq_factors)
    local = None if config.local_rope_theta is None else RotaryEmbedding(config.rotary_dim, config.local_rope_theta)
    return full, local


class LlamaForCausalLM(nn.Module):
    """A decoder of any family in model/family.py; the name is kept from when Llama was the only one."""

    def __init__(self, config: ModelConfig, plan: ModelPlan | None = None):
        """plan: what each layer and the model around them compute; None (every loaded model): model_plan(config)."""
        super().__init__()
        plan = model_plan(config) if plan is None else plan
        if len(plan.layers) != config.num_layers:
            raise ValueError(f"the plan must hold {config.num_layers} layers, got {len(plan.layers)}")
        if "sliding" in plan.rope_tables and config.local_rope_theta is None:
            raise ValueError("the plan's layers read the sliding rotary table but local_rope_theta is None")
        self.config, self.plan = config, plan
        self.model = LlamaBackbone(config, self.plan)
        self.rotary, self.rotary_local = rotary_tables(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    # The final norm's weight is always a float parameter; the embedding may be kept quantized.
    @property
    def device(self) -> torch.device:
        return self.model.norm.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.norm.weight.dtype

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.model.embed_tokens(ids)  # [B, T, C]
        if self.plan.embed_scale is not None:  # the scale rounded to the compute dtype first, as Gemma does
            x = x * torch.tensor(self.plan.embed_scale, dtype=x.dtype)
        return x

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return soft_cap(self.lm_head(self.model.norm(x)).float(), self.plan.final_softcap)  # [B, T, V]

    def forward(self, ids: torch.Tensor, step: ForwardStep | None = None) -> torch.Tensor:
        """ids [B, T] -> logits of the step's logit_rows [B, R, V] (every row without a step)."""
        x = self.hidden_states(ids, step)  # [B, T, C]
        if step is not None and step.logit_rows is not None:
            x = x[:, step.logit_rows]  # [B, R, C]
        return self.head(x)  # [B, R, V]

    def hidden_states(self, ids: torch.Tensor, step: ForwardStep | None = None) -> torch.Tensor:
        """ids [B, T] -> the last layer's output [B, T, C], before the final norm.

        step (model/step.py): the new tokens' positions, and each layer's attend (store, then attend, under
        the layer's window), whatever cache lies behind it. None: a plain causal forward over ids.
        """
        T = ids.shape[1]
        step = CausalStep(T, ids.device) if step is None else step
        if step.positions.shape[-1] != T:
            raise ValueError(f"the step holds {step.positions.shape[-1]} positions for {T} new tokens")
        positions = step.positions.to(ids.device)  # [T] or [B, T]
        x = self.embed(ids)  # [B, T, C]
        tables = {"full": self.rotary, "sliding": getattr(self, "rotary_local", None)}
        ropes = {t: tables[t].cos_sin(positions, x.dtype) for t in self.plan.rope_tables}  # cos, sin [T, R] each
        for p, layer in zip(self.plan.layers, self.model.layers, strict=True):
            cos, sin = ropes[p.rope]
            x = layer(x, cos, sin, step)
        return x  # [B, T, C]
