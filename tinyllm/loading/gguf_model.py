"""A model's weights from a GGUF file, named by the family's table; the config is gguf_config.py's."""

from __future__ import annotations

import re

import numpy as np
import torch

from ..config import ModelConfig
from ..errors import TinyLLMError
from ..model.family import FAMILIES, Family
from .gguf_config import config_from_gguf  # noqa: F401  (the loader's one import for GGUF)
from .gguf_file import GGUFFile
from .names import GGUF_ROPE_FREQS, GGUF_ROPE_PERMUTED, GGUF_TENSOR_NAMES
from .progress import progress


def _our_name(gguf_name: str, family: Family) -> str | None:
    table = {**GGUF_TENSOR_NAMES, **dict(family.gguf_tensors)}
    layer = re.match(r"blk\.(\d+)\.", gguf_name)
    if layer:
        pattern = "blk.{i}." + gguf_name[layer.end() :]
        target = table.get(pattern)
        return target.format(i=layer.group(1), e="{e}") if target else None  # "{e}": one name per expert
    return table.get(gguf_name)


def unpermute_rope_rows(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation: per head, rows (pair j, member m) go back to (m, j)."""
    rows, cols = w.shape
    return w.reshape(num_heads, rows // num_heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def unpermute_rope_index(rows: int, num_heads: int) -> torch.Tensor:
    """The same permutation as a row index: row i of our layout is row index[i] of the file's."""
    index = np.arange(rows).reshape(rows, 1)  # [rows, 1]
    return torch.from_numpy(unpermute_rope_rows(index, num_heads).reshape(-1))  # [rows]


def _tensor(g: GGUFFile, gguf_name: str, name: str, config: ModelConfig, dtype: torch.dtype, native: bool):
    """A float tensor, or (native) a QuantWeight viewing the file; Q/K rows reordered either way (for the
    families llama.cpp permutes), norm weights shifted back where llama.cpp stored them shifted."""
    family = FAMILIES[config.family]
    heads = next((getattr(config, f) for suffix, f in GGUF_ROPE_PERMUTED.items() if name.endswith(suffix)), None)
    heads = heads if family.gguf_rope_permuted else None
    if native and g.can_stay_quantized(gguf_name):
        w = g.quant_weight(gguf_name)
        return w if heads is None else w.rows(unpermute_rope_index(w.shape[0], heads))  # copies Q/K only
    if g.can_stay_quantized(gguf_name):
        g.quant_weight(gguf_name)  # the block table's check: a corrupt one must not become garbage floats
    w = g.dequantize(gguf_name)
    if heads is not None:
        w = unpermute_rope_rows(w, heads)
    if family.gguf_norm_shift and gguf_name.endswith("norm.weight"):
        w = w - np.float32(family.gguf_norm_shift)
    return torch.from_numpy(w if w.flags.writeable else w.copy()).to(dtype)


def _expert_tensors(g: GGUFFile, gguf_name: str, dtype: torch.dtype, native: bool) -> list:
    """A stack of experts' weights [E, N, K] -> one weight [N, K] per expert: QuantWeights viewing the file's
    blocks (native), else float tensors."""
    num_experts = int(g.tensors[gguf_name].shape[-1])  # ggml lists the fastest dim first
    if g.can_stay_quantized(gguf_name):
        weights = [g.quant_weight(gguf_name, e) for e in range(num_experts)]  # checked either way
        if native:
            return weights
    w = g.dequantize(gguf_name)  # [E, N, K]
    return list(torch.from_numpy(w if w.flags.writeable else w.copy()).to(dtype).unbind(0))


def state_dict_from_gguf(g: GGUFFile, config: ModelConfig, dtype: torch.dtype, native: bool = False) -> dict:
    """Our parameter names (HF names, before fusing) -> float tensors, or QuantWeights where `native`."""
    state = {}
    family = FAMILIES[config.family]
    for gguf_name in progress([n for n in g.tensors if n != GGUF_ROPE_FREQS], desc="loading weights"):
        name = _our_name(gguf_name, family)
        if name is None:
            raise TinyLLMError(f"{g.path!r} holds tensor {gguf_name!r}, which a {family.name} model does not have")
        if "{e}" in name:
            experts = _expert_tensors(g, gguf_name, dtype, native)
            state.update((name.format(e=e), w) for e, w in enumerate(experts))
        else:
            state[name] = _tensor(g, gguf_name, name, config, dtype, native)
    return state
