"""Load a model from a path (a .gguf file or a Hugging Face folder), or the default model."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ..config import ModelConfig
from ..errors import TinyLLMError
from ..model.llama import LlamaForCausalLM
from ..model.rope import RotaryEmbedding
from ..text.tokenizer import Tokenizer
from .default_model import default_model_path
from .gguf_file import open_gguf
from .gguf_model import config_from_gguf, state_dict_from_gguf
from .hf_model import config_from_hf, read_json, state_dict_from_hf


@dataclass
class LoadedModel:
    path: str
    format: str  # "gguf" or "safetensors"
    config: ModelConfig
    model: LlamaForCausalLM
    tokenizer: Tokenizer
    eos_ids: tuple[int, ...]
    weight_types: dict[str, int]  # storage type in the file -> tensor count


def build_model(config: ModelConfig, state: dict[str, torch.Tensor], device: torch.device | str,
                source: str) -> LlamaForCausalLM:
    """Put loaded weights into a model without allocating them twice; nothing is half-loaded on error."""
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
        state["lm_head.weight"] = state.get("model.embed_tokens.weight")
    expected = {name: p.shape for name, p in model.state_dict().items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise TinyLLMError(f"{source!r} does not match a Llama model of its config: "
                           f"missing {missing[:3]}, unexpected {unexpected[:3]}")
    for name, shape in expected.items():
        if tuple(state[name].shape) != tuple(shape):
            raise TinyLLMError(f"{source!r}: tensor {name} has shape {tuple(state[name].shape)}, "
                               f"expected {tuple(shape)}")
    model.load_state_dict({k: v.to(device) for k, v in state.items()}, assign=True, strict=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.rotary = RotaryEmbedding(config.rotary_dim, config.rope_theta).to(device)
    return model.eval().requires_grad_(False)


def _load_gguf(path: str, dtype, device) -> LoadedModel:
    g = open_gguf(path)
    config = config_from_gguf(g)
    tokenizer = Tokenizer.from_gguf(g)
    types: dict[str, int] = {}
    for name in g.tensors:
        types[g.tensor_type(name)] = types.get(g.tensor_type(name), 0) + 1
    model = build_model(config, state_dict_from_gguf(g, config, dtype), device, path)
    return LoadedModel(path, "gguf", config, model, tokenizer, tokenizer.stop_ids, types)


def _hf_eos_ids(folder: str, tokenizer: Tokenizer) -> tuple[int, ...]:
    ids = set(tokenizer.stop_ids)
    gen_path = os.path.join(folder, "generation_config.json")
    if os.path.isfile(gen_path):
        eos = read_json(gen_path).get("eos_token_id")
        ids.update([eos] if isinstance(eos, int) else (eos or []))
    return tuple(sorted(ids))


def _load_hf(folder: str, dtype, device) -> LoadedModel:
    config = config_from_hf(folder)
    tokenizer = Tokenizer.from_hf_folder(folder)
    state = state_dict_from_hf(folder, dtype)
    model = build_model(config, state, device, folder)
    return LoadedModel(folder, "safetensors", config, model, tokenizer, _hf_eos_ids(folder, tokenizer),
                       {str(dtype).removeprefix("torch."): len(state)})


def load(path: str | os.PathLike | None = None, dtype: torch.dtype = torch.float32,
         device: str | torch.device = "cpu") -> LoadedModel:
    path = default_model_path() if path is None else os.fspath(path)
    if os.path.isdir(path):
        return _load_hf(path, dtype, device)
    if not os.path.exists(path):
        raise TinyLLMError(f"model path {path!r} does not exist (expected a .gguf file or a Hugging Face folder)")
    return _load_gguf(path, dtype, device)
