"""A decode step as one native call through every layer (model/native/csrc/decode.cpp), for the models it covers.

A batch-1 token through the module path is ~1100 eager calls around 121 quantized matmuls: about as much time
again as the matmuls themselves on a small model. The native step runs the same computation (same weights
as blocks, same float32 arithmetic up to summation order, and e^x as a polynomial within 2 ulp) for N decode
tokens in one call, from the embedding lookup (quantized embeddings) to the layers' output, and a second call
runs the final norm and the head (a quantized one) over the rows to sample. Between the two nothing but the
call itself runs in Python: after a step has streamed its weights through the caches, every torch op costs
more than the work it does (figures: docs/benchmarks.md, "Figures behind choices in the code").

It covers every family of model/family.py: pre-norm and sandwich layers, RMSNorm and (1 + w) RMSNorm,
SwiGLU and GeGLU, q/k/v biases, per-head q/k norms, a query scale, an attention soft-cap, sliding windows and
a second rotary table, a mixture of experts in place of the dense MLP (a softmax router over float32 or quantized
rows, top-k, renormalised or not: csrc/moe.h), with quantized projections (a fused one may hold parts of different
formats, as mixed-format files store v wider than q and k); float32 activations, and KV stored in float32, float16 or
bfloat16 (rounded as torch rounds the module path's writes, widened exactly on reading). Float weights (the
reference path), another KV dtype, MLA attention or tensor-parallel shards run the module path;
`unsupported(model)` says why.
"""

from __future__ import annotations

from array import array

import torch
from torch import nn

from ...kernels.qweight import QuantWeight
from ..attention import GQAttention
from ..moe import MoEMLP
from ..norm import RMSNorm, RMSNormPlusOne
from ..plan import ROPE_TABLES, LayerPlan
from ..quant_bias import BiasedQuantLinear
from ..quant_linear import QuantEmbedding, QuantLinear
from ..sdpa import soft_cap
from .library import library
from .step_structs import (
    ACTIVATIONS,
    KV_TYPES,
    DecodeStack,
    Embedding,
    Head,
    LayerWeights,
    StackShape,
    StepTokens,
)

MAX_TOKENS = 64  # tokens a draft model feeds the native step per call
GROUP_TOKENS = 256  # tokens per native call: its scratch grows with them (~10 KB a token on the default model)


def _quantized(linear, max_parts: int, kinds=(QuantLinear,)) -> bool:
    return type(linear) in kinds and 1 <= len(linear.parts) <= max_parts


def _norms(layer) -> list:
    return [m for name, m in layer.named_modules() if name.endswith("norm")]


def _layer_reason(layer) -> str | None:
    attn, mlp = layer.self_attn, layer.mlp
    if type(attn) is not GQAttention:
        return "its attention is not grouped-query attention"
    if not (_quantized(attn.qkv_proj, 3, (QuantLinear, BiasedQuantLinear)) and _quantized(attn.o_proj, 1)):
        return "its attention projections are not quantized weights"
    if type(mlp) is MoEMLP:
        return _experts_reason(mlp)
    if not (_quantized(mlp.gate_up_proj, 2) and _quantized(mlp.down_proj, 1)):
        return "its MLP projections are not quantized weights"
    if any(type(m) not in (RMSNorm, RMSNormPlusOne) or m.weight.dtype != torch.float32 for m in _norms(layer)):
        return "its norms are not float32 RMSNorms"
    return None


def _plan_reason(layer: LayerPlan) -> str | None:
    """Why the native step cannot run a layer of this plan, or None."""
    if layer.activation not in ACTIVATIONS:
        return f"the activation {layer.activation} is not covered"
    moe = layer.moe
    if moe is not None and (moe.router != "softmax" or moe.shared_expert or moe.router_bias or moe.expert_bias):
        return f"the {moe.router} router, a shared expert or biases of the router or experts are not covered"
    if layer.sinks:
        return "attention sinks are not covered"
    if layer.o_bias:
        return "a bias on the attention's output is not covered"
    return None


def _experts_reason(mlp: MoEMLP) -> str | None:
    if not (_quantized(mlp.gate, 1) or _float_rows(mlp.gate)):
        return "its router is neither a quantized weight nor float32 without a bias"
    if not all(_quantized(e.gate_up_proj, 2) and _quantized(e.down_proj, 1) for e in mlp.experts):
        return "its experts' projections are not quantized weights"
    return None


def _float_rows(linear) -> bool:
    return type(linear) is nn.Linear and linear.bias is None and linear.weight.dtype == torch.float32


def _router(gate) -> QuantWeight | torch.Tensor:
    """The router as the native step reads it: its blocks, or its float32 rows."""
    return gate.parts[0] if type(gate) is QuantLinear else gate.weight.detach().contiguous()


def unsupported(model) -> str | None:
    """Why the native step cannot run this model, or None when it can."""
    plan, config = getattr(model, "plan", None), getattr(model, "config", None)
    if plan is None or config is None:
        return "it is not a decoder of model/llama.py"
    if library() is None:
        return "the native decode step is not built"
    reason = next((r for r in map(_plan_reason, plan.layers) if r is not None), None)
    if reason is not None:
        return reason
    if getattr(model, "rotary", None) is not None and model.rotary.attention_factor != 1.0:
        return "YaRN's attention factor on the rotary tables is not covered"
    if model.dtype != torch.float32 or model.device.type != "cpu":
        return "it does not run in float32 on the CPU"
    if config.rotary_dim > config.head_dim:
        return f"rotary_dim {config.rotary_dim} exceeds the head"
    for layer in model.model.layers:
        reason = _layer_reason(layer)
        if reason is not None:
            return reason
    return None


def _scale(norm) -> torch.Tensor | None:
    """The factor a norm multiplies x / rms(x) by, as float32: w, or (1 + w) for Gemma's (computed as the
    module computes it)."""
    if norm is None:
        return None
    w = norm.weight.detach().float()
    return (1.0 + w if isinstance(norm, RMSNormPlusOne) else w).contiguous()


def _layer_weights(layer, plan: LayerPlan, storage, index: int, head_dim: int) -> LayerWeights:
    attn, mlp, moe = layer.self_attn, layer.mlp, plan.moe
    sandwich = plan.block == "sandwich"
    bias = getattr(attn.qkv_proj, "bias", None) if plan.qkv_bias else None
    return LayerWeights(
        attn_norm=_scale(layer.input_layernorm),
        attn_out_norm=_scale(layer.post_attention_layernorm) if sandwich else None,
        mlp_norm=_scale(layer.pre_feedforward_layernorm if sandwich else layer.post_attention_layernorm),
        mlp_out_norm=_scale(layer.post_feedforward_layernorm) if sandwich else None,
        q_norm=_scale(attn.q_norm) if plan.qk_norm else None,
        k_norm=_scale(attn.k_norm) if plan.qk_norm else None,
        qkv=list(attn.qkv_proj.parts),
        gate_up=None if moe else list(mlp.gate_up_proj.parts),
        o=attn.o_proj.parts[0],
        down=None if moe else mlp.down_proj.parts[0],
        qkv_bias=None if bias is None else bias.detach().float().contiguous(),
        k_cache=storage.k[index],
        v_cache=storage.v[index],
        k_scale=None if storage.k_scale is None else storage.k_scale[index],
        v_scale=None if storage.v_scale is None else storage.v_scale[index],
        window=plan.window,
        rope=ROPE_TABLES.index(plan.rope),
        activation=plan.activation,
        scale=plan.attn_scale if plan.attn_scale is not None else head_dim**-0.5,
        softcap=plan.attn_softcap,
        num_experts=moe and moe.num_experts,
        router=moe and _router(mlp.gate),
        experts_gate_up=moe and [list(e.gate_up_proj.parts) for e in mlp.experts],
        experts_down=moe and [e.down_proj.parts[0] for e in mlp.experts],
        top_k=moe and moe.top_k,
        renormalize=moe and moe.renormalize,
    )


def build_stack(model, storage) -> DecodeStack | None:
    """The native step over this model and KV storage, or None when either is not covered."""
    if unsupported(model) is not None or storage.dtype not in KV_TYPES or storage.device.type != "cpu":
        return None
    c, plan = model.config, model.plan
    layers = [
        _layer_weights(layer, p, storage, i, c.head_dim)
        for i, (p, layer) in enumerate(zip(plan.layers, model.model.layers, strict=True))
    ]
    shape = StackShape(
        c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size, c.rotary_dim, c.rms_norm_eps,
        storage.dtype,
    )  # fmt: skip
    tables = [model.rotary] + ([model.rotary_local] if "sliding" in plan.rope_tables else [])  # ROPE_TABLES order
    inv_freq = [t.inv_freq.float().contiguous() for t in tables]
    return DecodeStack(library(), shape, layers, inv_freq, _head(model), _embedding(model))


def _embedding(model) -> Embedding | None:
    """The token embeddings for the native step, when they are quantized blocks (else model.embed runs)."""
    table = model.model.embed_tokens
    if type(table) is not QuantEmbedding or table.dtype != torch.float32:
        return None
    return Embedding(table.weight, model.plan.embed_scale)


def _head(model) -> Head | None:
    """The final norm and output projection for the native step, when they are a float32 RMSNorm and one
    quantized weight (else the module's head runs them)."""
    norm, head = model.model.norm, model.lm_head
    if type(norm) not in (RMSNorm, RMSNormPlusOne) or norm.weight.dtype != torch.float32:
        return None
    if not _quantized(head, 1):
        return None
    return Head(_scale(norm), norm.eps, head.parts[0])


def decode_logits(
    model,
    stack: DecodeStack,
    ids: torch.Tensor,
    positions: torch.Tensor,
    write_slots: torch.Tensor,
    key_slots: torch.Tensor,
    rows: torch.Tensor,
    key_rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """ids, positions, write_slots [N], key_slots [R, Smax] (a sequence's slots from position 0, padded) and
    key_rows [N] (token i's row of key_slots; None: row i) -> logits of the chosen rows [len(rows), V].

    Tokens go through the layers GROUP_TOKENS at a time, in order, so the scratch stays bounded however many
    a step holds (a token's keys are written before any later token reads them; its arithmetic is the same in
    any group)."""
    n = ids.shape[0]
    native_ids = stack.embeds  # the step looks the tokens up into x itself
    # [N, C]: a fresh tensor the step writes in place
    x = torch.empty(n, stack.shape.hidden) if native_ids else model.embed(ids[None])[0].float().contiguous()
    for a in range(0, n, GROUP_TOKENS):
        b = min(n, a + GROUP_TOKENS)
        keys, rows_of = (key_slots, key_rows[a:b]) if key_rows is not None else (key_slots[a:b], None)
        stack.run(x[a:b], positions[a:b], write_slots[a:b], keys, rows_of, ids=ids[a:b] if native_ids else None)
    if not stack.has_head:
        return model.head(x[rows][None])[0]  # [len(rows), V]
    return _capped(model, stack.head(x, rows))  # [len(rows), V]


def step_logits(model, stack: DecodeStack, tokens: StepTokens, rows: array) -> torch.Tensor:
    """The engine's native step: tokens (flat arrays, their keys through block tables) -> the logits of the
    chosen rows [len(rows), V]. With the embeddings and the head in the stack, two native calls and one tensor
    (the logits) are all the step makes."""
    n = len(tokens.ids)
    if stack.embeds and stack.has_head:
        logits = stack.logits(tokens, rows, GROUP_TOKENS)
    else:
        ids = torch.tensor(tokens.ids, dtype=torch.long)
        x = torch.empty(n, stack.shape.hidden) if stack.embeds else model.embed(ids[None])[0].float().contiguous()
        for a in range(0, n, GROUP_TOKENS):
            stack.run_tokens(x[a : a + GROUP_TOKENS], tokens, a, min(n, a + GROUP_TOKENS))
        if not stack.has_head:
            return model.head(x[torch.tensor(rows, dtype=torch.long)][None])[0]  # [len(rows), V]
        logits = stack.head(x, rows)
    return _capped(model, logits)


def _capped(model, logits: torch.Tensor) -> torch.Tensor:
    """The plan's final soft-cap (Gemma 2), as model.head applies it."""
    return soft_cap(logits, model.plan.final_softcap)
