"""What `tinyllm info` and Ollama's /api/show tell of a loaded model: its shape, features, weights in memory,
KV cost per token, tokenizer and stop ids."""

from __future__ import annotations

from ..cache.q8_kv import bytes_per_value
from ..config import KV_DTYPES, ModelConfig
from .features import idle_expert_parameters, model_features
from .quant_linear import activations, quant_weights, weight_summary


def model_info(
    model, config: ModelConfig, tokenizer, eos_ids, *, path: str, file_format: str, weight_types: dict
) -> dict:
    """The model's description as a JSON-ready dict; `config` is the one it runs under (a ctx_size shows)."""
    c = config
    n_params = sum(p.numel() for p in model.parameters())
    n_params += sum(w.shape[0] * w.shape[1] for w in quant_weights(model))
    memory = weight_summary(model)
    return {
        "path": path,
        "format": file_format,
        "architecture": c.architecture,
        "family": c.family,
        "features": model_features(c),
        "parameters": n_params,
        "active_parameters": n_params - idle_expert_parameters(c),  # a token's: all but the experts it skips
        "layers": c.num_layers,
        "heads": c.num_heads,
        "kv_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "hidden_size": c.hidden_size,
        "vocab_size": c.vocab_size,
        "context_length": c.context_length,
        "rope_theta": c.rope_theta,
        "tied_embeddings": c.tie_word_embeddings,
        "dtype": str(model.dtype).removeprefix("torch."),
        "weight_types": weight_types,
        "weights_in_memory": memory,
        "weight_bytes": sum(m["bytes"] for m in memory.values()),
        **activations(model),
        "kv_bytes_per_token": c.kv_bytes_per_token(model.dtype.itemsize),  # in the default kv_dtype
        "kv_bytes_per_token_by_kv_dtype": {
            name: c.kv_bytes_per_token(bytes_per_value(dtype)) for name, dtype in KV_DTYPES.items()
        },
        "tokenizer": tokenizer.kind,
        "eos_ids": list(eos_ids),
    }
