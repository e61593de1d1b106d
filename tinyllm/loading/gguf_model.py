"""A Llama model's config and weights from a GGUF file."""

from __future__ import annotations

import re

import numpy as np
import torch

from ..config import ModelConfig
from ..errors import TinyLLMError
from .gguf_file import GGUFFile
from .names import GGUF_CONFIG_KEYS, GGUF_ROPE_PERMUTED, GGUF_TENSOR_NAMES, SUPPORTED_GGUF_ARCHITECTURES
from .progress import progress


def config_from_gguf(g: GGUFFile) -> ModelConfig:
    arch = g.architecture
    if arch not in SUPPORTED_GGUF_ARCHITECTURES:
        raise TinyLLMError(
            f"{g.path!r} holds architecture {arch!r}, expected one of {', '.join(SUPPORTED_GGUF_ARCHITECTURES)}"
        )
    meta = g.metadata
    values = {}
    for field, key in GGUF_CONFIG_KEYS.items():
        key = key.format(arch=arch)
        if key in meta:
            values[field] = meta[key]
    if "rope_freqs.weight" in g.tensors:
        raise TinyLLMError(f"{g.path!r} uses rotary frequency factors (rope_freqs), which are not supported")
    required = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "max_position_embeddings")
    missing = [GGUF_CONFIG_KEYS[f].format(arch=arch) for f in required if f not in values]
    if missing:
        raise TinyLLMError(f"{g.path!r} lacks metadata {', '.join(missing)}")
    values.setdefault("num_kv_heads", values["num_heads"])
    values.setdefault("head_dim", values["hidden_size"] // values["num_heads"])
    values.setdefault("vocab_size", len(meta.get("tokenizer.ggml.tokens", ())))
    values["tie_word_embeddings"] = "output.weight" not in g.tensors
    ints = {k: int(v) for k, v in values.items() if k not in ("rope_theta", "rms_norm_eps", "tie_word_embeddings")}
    values.update(ints)
    try:
        return ModelConfig(architecture=arch, **values)
    except ValueError as exc:
        raise TinyLLMError(f"{g.path!r} has an invalid config: {exc}") from None


def _our_name(gguf_name: str) -> str | None:
    layer = re.match(r"blk\.(\d+)\.", gguf_name)
    if layer:
        pattern = "blk.{i}." + gguf_name[layer.end() :]
        target = GGUF_TENSOR_NAMES.get(pattern)
        return target.format(i=layer.group(1)) if target else None
    return GGUF_TENSOR_NAMES.get(gguf_name)


def unpermute_rope_rows(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation: per head, rows (pair j, member m) go back to (m, j)."""
    rows, cols = w.shape
    return w.reshape(num_heads, rows // num_heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def unpermute_rope_index(rows: int, num_heads: int) -> torch.Tensor:
    """The same permutation as a row index: row i of our layout is row index[i] of the file's."""
    index = np.arange(rows).reshape(rows, 1)  # [rows, 1]
    return torch.from_numpy(unpermute_rope_rows(index, num_heads).reshape(-1))  # [rows]


def _tensor(g: GGUFFile, gguf_name: str, name: str, config: ModelConfig, dtype: torch.dtype, native: bool):
    """A float tensor, or (native) a QuantWeight viewing the file; Q/K rows reordered either way."""
    heads = next((getattr(config, f) for suffix, f in GGUF_ROPE_PERMUTED.items() if name.endswith(suffix)), None)
    if native and g.can_stay_quantized(gguf_name):
        w = g.quant_weight(gguf_name)
        return w if heads is None else w.rows(unpermute_rope_index(w.shape[0], heads))  # copies Q/K only
    if g.can_stay_quantized(gguf_name):
        g.quant_weight(gguf_name)  # the block table's check: a corrupt one must not become garbage floats
    w = g.dequantize(gguf_name)
    if heads is not None:
        w = unpermute_rope_rows(w, heads)
    return torch.from_numpy(w if w.flags.writeable else w.copy()).to(dtype)


def state_dict_from_gguf(g: GGUFFile, config: ModelConfig, dtype: torch.dtype, native: bool = False) -> dict:
    """Our parameter names (HF names, before fusing) -> float tensors, or QuantWeights where `native`."""
    state = {}
    for gguf_name in progress(list(g.tensors), desc="loading weights"):
        name = _our_name(gguf_name)
        if name is None:
            raise TinyLLMError(f"{g.path!r} holds tensor {gguf_name!r}, which a Llama model does not have")
        state[name] = _tensor(g, gguf_name, name, config, dtype, native)
    return state
