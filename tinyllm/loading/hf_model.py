"""A model's weights from a Hugging Face folder (safetensors, one file or shards); the config is
hf_config.py's."""

from __future__ import annotations

import json
import os

import torch

from ..errors import TinyLLMError
from .progress import progress


def read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise TinyLLMError(f"cannot read {path!r}: {exc}") from None


def _weight_files(folder: str) -> list[str]:
    single = os.path.join(folder, "model.safetensors")
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(single):
        return [single]
    if os.path.isfile(index):
        shards = sorted(set(read_json(index).get("weight_map", {}).values()))
        missing = [s for s in shards if not os.path.isfile(os.path.join(folder, s))]
        if missing or not shards:
            raise TinyLLMError(f"{index!r} names shards that are missing: {', '.join(missing) or 'none listed'}")
        return [os.path.join(folder, s) for s in shards]
    raise TinyLLMError(f"model folder {folder!r} has no model.safetensors or model.safetensors.index.json")


def state_dict_from_hf(folder: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state = {}
    for path in progress(_weight_files(folder), desc="loading shards"):
        try:
            shard = load_file(path)
        except (SafetensorError, OSError) as exc:
            raise TinyLLMError(f"{path!r} is not a readable safetensors file: {exc}") from None
        state.update({name: t.to(dtype) for name, t in shard.items()})
    # Rotary inverse frequencies are derived from the config, never loaded.
    return {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
