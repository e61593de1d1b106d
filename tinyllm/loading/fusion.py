"""Fused projections: HF-named q/k/v and gate/up weights concatenated by rows into our qkv_proj and
gate_up_proj (at load), and split back (for writing a model out in HF names).

Concatenating rows is exact for float tensors and for block formats alike (a block never spans two rows).
Quantized parts in different formats cannot share one block table; they stay a tuple of parts. A group that
mixes float and quantized parts (llama.cpp's Q2_K and Q3_K_M files put a Q3_K or Q2_K attn_q, expanded to float
at load, beside a Q4_K or Q6_K attn_v) is dequantized whole: the fused weight is float, as exact as its parts.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..config import ModelConfig
from ..errors import TinyLLMError
from ..kernels import QuantWeight, dequantize
from .names import FUSED_PARAMETERS


def concat_rows(parts: list, pack: Callable[[list], QuantWeight | None] | None = None):
    """Tensors -> one tensor; QuantWeights of one format -> one QuantWeight (`pack(parts)` where given and not
    None: a weight packed from the parts, with no stacked blocks); mixed formats -> a tuple; tensors and
    QuantWeights -> one tensor, the QuantWeights dequantized to the tensors' dtype."""
    floats = [p for p in parts if isinstance(p, torch.Tensor)]
    if floats:  # QuantWeights among tensors: the whole group as float
        return torch.cat([p if isinstance(p, torch.Tensor) else dequantize(p).to(floats[0].dtype) for p in parts])
    if len({p.fmt for p in parts}) == 1 and len({p.shape[1] for p in parts}) == 1:
        packed = pack(parts) if pack is not None else None
        if packed is not None:
            return packed
        rows = sum(p.shape[0] for p in parts)
        return QuantWeight(torch.cat([p.data for p in parts]), parts[0].fmt, (rows, parts[0].shape[1]))
    return tuple(parts)


def _columns(value) -> int:
    parts = value if isinstance(value, tuple) else (value,)
    return int(parts[0].shape[-1])


def fuse(state: dict, source: str = "<memory>", pack: Callable[[list], QuantWeight | None] | None = None) -> dict:
    """HF names -> ours: each complete group of parts becomes one fused entry (`concat_rows`, with `pack`). An
    incomplete group is left as it is, so the model's name check reports exactly what is missing."""
    out = dict(state)
    for fused, parts in FUSED_PARAMETERS.items():
        prefixes = sorted(name[: -len(parts[0])] for name in state if name.endswith(parts[0]))
        for prefix in prefixes:
            names = [prefix + p for p in parts]
            if all(n in out for n in names):
                for n in names[1:] if fused.endswith(".weight") else ():  # biases are vectors: any lengths
                    if _columns(out[n]) != _columns(out[names[0]]) or len(getattr(out[n], "shape", ())) != 2:
                        raise TinyLLMError(
                            f"{source!r}: tensor {n} has shape {tuple(out[n].shape)}, expected "
                            f"{_columns(out[names[0]])} columns like {names[0]}"
                        )
                group = [out.pop(n) for n in names]
                out[prefix + fused] = _kept_parts(group, pack) if ".experts." in prefix else concat_rows(group, pack)
    return out


def _kept_parts(parts: list, pack: Callable[[list], QuantWeight | None] | None):
    """An expert's gate and up: blocks stay a tuple of parts, views into the file's expert stacks (concatenated,
    they would copy two thirds of a mixture of experts' weights), unless `pack` packs them; floats concatenate."""
    if not all(isinstance(p, QuantWeight) for p in parts):
        return concat_rows(parts, pack)
    packed = pack(parts) if pack is not None else None
    return packed if packed is not None else tuple(parts)


def fused_sizes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Rows of each part of each fused parameter, in FUSED_PARAMETERS order."""
    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    expert = config.experts.intermediate_size if config.experts else config.intermediate_size
    return {
        "self_attn.qkv_proj.weight": (q, kv, kv),
        "mlp.gate_up_proj.weight": (config.intermediate_size, config.intermediate_size),
        "self_attn.qkv_proj.bias": (q, kv, kv),
        "gate_up_proj.weight": (expert, expert),
        "gate_up_proj.bias": (expert, expert),
    }


def split(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Ours -> HF names: float fused entries split back into their parts."""
    out = {}
    sizes = fused_sizes(config)
    for name, value in state.items():
        fused = next((f for f in FUSED_PARAMETERS if name.endswith(f)), None)
        if fused is None:
            out[name] = value
            continue
        prefix = name[: -len(fused)]
        for part, rows in zip(FUSED_PARAMETERS[fused], value.split(sizes[fused])):
            out[prefix + part] = rows
    return out
