"""Synthetic mixture-of-experts files (synthetic.py's MOE_SHAPES): a Qwen3-MoE layer shape with random weights,
written straight in Q8_0 by the project's own quantizer (loading/quantize.py), since llama.cpp's may be absent.
The experts are stacks [E, ff, C] per projection, as llama.cpp's converter writes them; the router and the norms
float32. Fewer layers than the real model keep the file small; each layer's active bytes per token are the real
model's (attention, the router and top_k of num_experts experts)."""

from __future__ import annotations

import numpy as np
import torch

from ..loading.quantize import quantize_q8_0
from .synthetic_vocab import add_vocabulary

STD = 0.02  # of every matrix's weights


def _q8_0(g: torch.Generator, *dims: int) -> np.ndarray:
    """Random normal weights [*dims] (a matrix, or a stack of them) as Q8_0 blocks: uint8 [*dims[:-1], dims[-1] /
    32 * 34], one matrix at a time."""
    if len(dims) == 3:
        return np.stack([_q8_0(g, *dims[1:]) for _ in range(dims[0])])
    w = torch.randn(*dims, generator=g) * STD
    return quantize_q8_0(w).data.numpy()  # [rows, row bytes]


def write_q8_0(shape, path: str, vocabulary, seed: int = 0) -> None:
    """A qwen3moe GGUF of `shape` (synthetic.Shape with experts) in Q8_0; vocabulary: (tokens, types, merges,
    template) as synthetic_vocab.vocabulary gives them."""
    import gguf

    g = torch.Generator().manual_seed(seed)
    q8 = gguf.GGMLQuantizationType.Q8_0
    arch, C, D = shape.architecture, shape.hidden, shape.head_dim
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"synthetic {arch} {shape.layers}x{C}, {shape.experts} experts")
    w.add_block_count(shape.layers)
    w.add_context_length(shape.context)
    w.add_embedding_length(C)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(shape.experts)
    w.add_expert_used_count(shape.top_k)
    w.add_expert_feed_forward_length(shape.expert_ffn)
    w.add_vocab_size(shape.vocab)
    w.add_file_type(7)  # MOSTLY_Q8_0
    add_vocabulary(w, vocabulary)

    def matrix(name: str, *dims: int) -> None:
        w.add_tensor(name, _q8_0(g, *dims), raw_dtype=q8)

    def ones(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    matrix("token_embd.weight", shape.vocab, C)
    E, ff, kv = shape.experts, shape.expert_ffn, shape.kv_heads * D
    for i in range(shape.layers):
        b = f"blk.{i}."
        ones(b + "attn_norm.weight", C)
        matrix(b + "attn_q.weight", shape.heads * D, C)
        matrix(b + "attn_k.weight", kv, C)
        matrix(b + "attn_v.weight", kv, C)
        ones(b + "attn_q_norm.weight", D)
        ones(b + "attn_k_norm.weight", D)
        matrix(b + "attn_output.weight", C, shape.heads * D)
        ones(b + "ffn_norm.weight", C)
        router = torch.randn(E, C, generator=g) * STD
        w.add_tensor(b + "ffn_gate_inp.weight", router.numpy())
        matrix(b + "ffn_gate_exps.weight", E, ff, C)
        matrix(b + "ffn_up_exps.weight", E, ff, C)
        matrix(b + "ffn_down_exps.weight", E, C, ff)
    ones("output_norm.weight", C)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
