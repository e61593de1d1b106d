"""A Llama-family decoder (SmolLM2, Llama 2/3, TinyLlama, ...): wires embedding, blocks, norm and head.

Parameter names follow Hugging Face's LlamaForCausalLM, except that q/k/v and gate/up are fused into one
projection each (`qkv_proj`, `gate_up_proj`); the loaders map both HF and GGUF names by tables and
concatenate the fused rows (loading/fusion.py).
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from .attention import GQAttention
from .mlp import SwiGLU
from .norm import RMSNorm
from .rope import RotaryEmbedding


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x)). The attention is GQA unless given."""

    def __init__(self, config, layer_idx: int, attention: nn.Module | None = None):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = attention or GQAttention(
            config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim, layer_idx
        )
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size)

    def forward(self, x, cos, sin, mask, cache):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBackbone(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        # Zeros, not nn.Embedding's normal_ init: loaders build on the meta device, where normal_ imports
        # torch's Python decompositions (seconds and tens of MB); every weight is loaded afterwards anyway.
        self.embed_tokens = nn.Embedding(
            config.vocab_size, config.hidden_size, _weight=torch.zeros(config.vocab_size, config.hidden_size)
        )
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = LlamaBackbone(config)
        self.rotary = RotaryEmbedding(config.rotary_dim, config.rope_theta)
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

    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache=None,
        *,
        last_only: bool = False,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """ids [B, T] -> logits [B, T, V] ([B, 1, V] with last_only; [B, len(rows), V] for chosen rows).

        With a cache, positions and the mask are read from it once, before any layer appends; each layer
        then calls cache.update(layer, k, v) once. Without one this is a plain causal forward over ids.
        """
        T = ids.shape[1]
        mask = None
        if cache is not None:
            if positions is None:
                positions = cache.positions(T)  # [T] or [B, T]
            mask = cache.mask(T)  # [T, S] or [B, 1, T, S], True = may attend; None for a ragged batch
            if T == 1 and mask is not None and mask.dim() == 2:
                mask = None  # one new query of one sequence sees every stored key
        elif positions is None:
            positions = torch.arange(T, device=ids.device)  # [T]
        positions = positions.to(ids.device)
        x = self.model.embed_tokens(ids)  # [B, T, C]
        cos, sin = self.rotary.cos_sin(positions, x.dtype)  # [T, R] or [B, T, R]
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask, cache)
        if last_only:
            x = x[:, -1:]  # [B, 1, C]
        elif rows is not None:
            x = x[:, rows]  # [B, len(rows), C]
        return self.lm_head(self.model.norm(x)).float()  # [B, T, V]
