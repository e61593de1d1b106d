"""A Llama model's config and weights from a Hugging Face folder (config.json + safetensors)."""

from __future__ import annotations

import json
import os

import torch

from ..config import ModelConfig
from ..errors import TinyLLMError
from .names import HF_CONFIG_KEYS, SUPPORTED_HF_MODEL_TYPES
from .progress import progress


def read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise TinyLLMError(f"cannot read {path!r}: {exc}") from None


def _rope_theta(raw: dict) -> float | None:
    params = raw.get("rope_parameters") or {}
    scaling = raw.get("rope_scaling") or params
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ("default", None):
        raise TinyLLMError(f"rope scaling of type {kind!r} is not supported, expected none or 'default'")
    return raw.get("rope_theta", params.get("rope_theta"))


def config_from_hf(folder: str) -> ModelConfig:
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise TinyLLMError(f"model folder {folder!r} has no config.json")
    raw = read_json(path)
    model_type = raw.get("model_type")
    if model_type not in SUPPORTED_HF_MODEL_TYPES:
        raise TinyLLMError(
            f"{path!r} has model_type {model_type!r}, expected one of {', '.join(SUPPORTED_HF_MODEL_TYPES)}"
        )
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        raise TinyLLMError(f"{path!r} asks for biases in attention or MLP, which are not supported")
    values = {}
    for field, keys in HF_CONFIG_KEYS.items():
        for key in keys:
            if raw.get(key) is not None:
                values[field] = raw[key]
                break
    theta = _rope_theta(raw)
    if theta is not None:
        values["rope_theta"] = float(theta)
    values.setdefault("num_kv_heads", values.get("num_heads"))
    if "head_dim" not in values and "hidden_size" in values and values.get("num_heads"):
        values["head_dim"] = values["hidden_size"] // values["num_heads"]
    try:
        return ModelConfig(architecture=model_type, **values)
    except (TypeError, ValueError) as exc:
        raise TinyLLMError(f"{path!r} is not a valid Llama config: {exc}") from None


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
