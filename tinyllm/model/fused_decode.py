"""A decode step as one native call through every layer (kernels/csrc/decode.cpp), for the models it covers.

A batch-1 token through the module path is ~1100 eager calls around 121 quantized matmuls: about as much time
again as the matmuls themselves on a small model. The native step runs the same computation (same weights
as blocks, same float32 arithmetic up to summation order and a polynomial e^x within 2 ulp) for N decode
tokens in one call; the embedding lookup and the head stay in Python (one call each).

It covers pre-norm RMSNorm + SwiGLU layers (Llama, Mistral, Qwen2, Phi-3 layouts) whose projections are
single-format quantized weights, with q/k/v biases, a query scale, an attention soft-cap, sliding windows and
a second rotary table; float32 weights and KV. Any other model — sandwich norms, q/k norms, GeGLU, float
weights (the reference path), a KV dtype other than float32, tensor-parallel shards — runs the module path;
`unsupported(model)` says why.
"""

from __future__ import annotations

import torch

from ..kernels import native
from ..kernels.decode_step import DecodeStack, LayerWeights, StackShape
from .attention import GQAttention
from .quant_bias import BiasedQuantLinear
from .quant_linear import QuantLinear

MAX_TOKENS = 64  # decode rows per native step (its scratch grows with rows x heads x keys)


def _single(linear, kinds=(QuantLinear,)) -> bool:
    return type(linear) in kinds and len(linear.parts) == 1


def _layer_reason(layer) -> str | None:
    attn, mlp = layer.self_attn, layer.mlp
    if type(attn) is not GQAttention or hasattr(attn, "q_norm"):
        return "its attention is not plain grouped-query attention"
    if not (_single(attn.qkv_proj, (QuantLinear, BiasedQuantLinear)) and _single(attn.o_proj)):
        return "its attention projections are not single-format quantized weights"
    if not (_single(mlp.gate_up_proj) and _single(mlp.down_proj)):
        return "its MLP projections are not single-format quantized weights"
    norms = (layer.input_layernorm.weight, layer.post_attention_layernorm.weight)
    if any(w.dtype != torch.float32 for w in norms):
        return "its norm weights are not float32"
    return None


def unsupported(model) -> str | None:
    """Why the native step cannot run this model, or None when it can."""
    family, config = getattr(model, "family", None), getattr(model, "config", None)
    if family is None or config is None:
        return "it is not a decoder of model/llama.py"
    if native.library() is None:
        return "the native kernels are not built"
    if (family.block, family.norm, family.activation) != ("pre_norm", "rms", "silu"):
        return f"the {family.name} block (norm {family.norm}, {family.activation}, {family.block}) is not covered"
    if model.dtype != torch.float32 or model.device.type != "cpu":
        return "it does not run in float32 on the CPU"
    if config.rotary_dim > min(config.head_dim, 1024):
        return f"rotary_dim {config.rotary_dim} exceeds the head"
    for layer in model.model.layers:
        reason = _layer_reason(layer)
        if reason is not None:
            return reason
    return None


def build_stack(model, storage) -> DecodeStack | None:
    """The native step over this model and KV storage, or None when either is not covered."""
    if unsupported(model) is not None or storage.dtype != torch.float32 or storage.device.type != "cpu":
        return None
    c = model.config
    local = getattr(model, "rotary_local", None) is not None
    layers = []
    for i, layer in enumerate(model.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        layers.append(
            LayerWeights(
                layer.input_layernorm.weight.detach().contiguous(),
                layer.post_attention_layernorm.weight.detach().contiguous(),
                attn.qkv_proj.parts[0],
                attn.o_proj.parts[0],
                mlp.gate_up_proj.parts[0],
                mlp.down_proj.parts[0],
                attn.qkv_proj.bias.detach().float().contiguous() if hasattr(attn.qkv_proj, "bias") else None,
                storage.k[i],
                storage.v[i],
                attn.spec.window,
                1 if local and c.layer_kind(i) == "sliding" else 0,
            )
        )
    scale = c.query_scale if c.query_scale is not None else c.head_dim**-0.5
    shape = StackShape(
        c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size, c.rotary_dim,
        c.rms_norm_eps, scale, c.attn_softcap,
    )  # fmt: skip
    tables = [model.rotary] + ([model.rotary_local] if local else [])
    return DecodeStack(native.library(), shape, layers, [t.inv_freq.float().contiguous() for t in tables])


def decode_logits(
    model,
    stack: DecodeStack,
    ids: torch.Tensor,
    positions: torch.Tensor,
    write_slots: torch.Tensor,
    key_slots: torch.Tensor,
    rows: torch.Tensor,
) -> torch.Tensor:
    """ids, positions, write_slots [N] (one decode token per sequence), key_slots [N, Smax] (each token's
    sequence's slots from position 0, padded) -> logits of the chosen rows [len(rows), V]."""
    x = model.embed(ids[None])[0].float().contiguous()  # [N, C]; a fresh tensor the step writes in place
    stack.run(x, positions, write_slots, key_slots)
    return model.head(x[rows][None])[0]  # [len(rows), V]
