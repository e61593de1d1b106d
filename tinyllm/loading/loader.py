"""Load a model from a path (a .gguf file or a Hugging Face folder), a name or a Hugging Face id (resolved by
model_store.py), or the default model."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn

from ..config import ModelConfig
from ..errors import TinyLLMError
from ..kernels import QuantWeight, dequantize, native
from ..kernels.formats import FORMATS
from ..model.family import FAMILIES
from ..model.llama import LlamaForCausalLM, rotary_tables
from ..model.plan import ModelPlan
from ..model.quant_bias import BiasedQuantLinear
from ..model.quant_linear import QuantEmbedding, QuantLinear, quant_weights
from ..text.tokenizer import Tokenizer
from .fusion import fuse
from .gguf_file import open_gguf
from .gguf_model import config_from_gguf, state_dict_from_gguf
from .hf_config import config_from_hf
from .hf_model import read_json, state_dict_from_hf
from .hf_tensors import our_tensors
from .model_store import resolve_model
from .quantize import QUANTIZE_MODES, quantize_state
from .residency import release_unread_pages

WEIGHT_MODES = ("native", "native-int8", "native-int24", "dequantized")
NATIVE_MODES = ("native", "native-int8", "native-int24")
ACTIVATION_LIMBS = {"native-int8": 1, "native-int24": 3}  # the modes with integer activations: limbs of 8 bits


@dataclass
class LoadedModel:
    path: str
    format: str  # "gguf" or "safetensors"
    config: ModelConfig
    model: LlamaForCausalLM
    tokenizer: Tokenizer
    eos_ids: tuple[int, ...]
    weight_types: dict[str, int]  # storage type in the file -> tensor count


@dataclass(frozen=True)
class WeightOptions:
    """How weights are held. weights: "native" keeps block formats as blocks (matmuls run on them with float32
    activations), "native-int8" does too and quantizes the activations of their matmuls to 8 bits per 32
    (llama.cpp's arithmetic: faster, no longer equal to the reference), "native-int24" to three 8-bit limbs
    (24 bits per 32: the products within float32's rounding, at about the 8-bit mode's decode speed where
    memory bounds it), "dequantized" expands them to float at load (the reference path); None picks
    `default_cpu_weights` on the CPU and dequantized elsewhere. quantize: "int8"/"int4" turns a float model's
    weights into blocks at load."""

    weights: str | None = None
    quantize: str | None = None
    keep_blocks: bool = False  # with integer activations: keep the blocks beside the packed form (to shard them)

    def __post_init__(self):
        if self.weights not in (None, *WEIGHT_MODES):
            raise ValueError(f"weights must be one of {', '.join(WEIGHT_MODES)}, got {self.weights!r}")
        if self.quantize not in (None, *QUANTIZE_MODES):
            raise ValueError(f"quantize must be one of {', '.join(QUANTIZE_MODES)}, got {self.quantize!r}")

    def native_on(self, device) -> bool:
        on_cpu = torch.device(device).type == "cpu"
        if self.weights in NATIVE_MODES and not on_cpu:
            raise TinyLLMError(
                f"weights={self.weights!r} runs on the CPU only, got device {str(device)!r}; "
                "use weights='dequantized' there"
            )
        return self.weights in NATIVE_MODES or (self.weights is None and on_cpu)


INT24_MIN_BYTES = 256 << 20  # block weights from which weights=None takes 24-bit activations (with VNNI)


def default_cpu_weights(weights: list[QuantWeight]) -> str:
    """What weights=None means on the CPU for a model holding these block weights: "native-int24" where they
    take INT24_MIN_BYTES or more and the 8-bit kernel runs on AVX-512 VNNI, else "native" (float32
    activations). Both give float32-level results. Measured (docs/benchmarks-history.md, "24-bit activations"): from
    0.5B parameters on, 24-bit activations decode much faster and take prompts at about float32's speed; on a
    135M model they decode faster but take prompts and batches of requests slower; without AVX-512 three limbs
    cost more than float32 for prompts and batches."""
    lib = native.library()
    large = sum(w.data.numel() for w in weights) >= INT24_MIN_BYTES
    return "native-int24" if large and lib is not None and lib.tl_q8_vnni512() else "native"


def _activation_limbs(options: WeightOptions, weights: list[QuantWeight]) -> int | None:
    """8-bit limbs per activation of the model's block weights: 1 or 3 where the weights (given, or the CPU's
    default for these weights) take integer activations, else None."""
    return ACTIVATION_LIMBS.get(options.weights or default_cpu_weights(weights))


def _int8_activations(model: nn.Module, options: WeightOptions, source: str) -> None:
    """weights="native-int8" / "native-int24" (or None where that is the CPU's default): every weight kept as
    blocks multiplies activations quantized to one or three 8-bit limbs."""
    weights = quant_weights(model)
    if not weights and options.weights is None:
        return  # a float model, or one expanded to float
    limbs = _activation_limbs(options, weights)
    if limbs is None:
        return
    if not weights:
        raise TinyLLMError(
            f"weights={options.weights!r} needs weights kept as blocks ({', '.join(FORMATS)}), and {source!r} has"
            " none (a float model can be quantized at load with quantize='int8' or 'int4')"
        )
    lib = native.library()
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, QuantEmbedding)}  # rows looked up
    for w in weights:
        w.int8_activations, w.limbs = True, limbs
        if lib is None:
            continue
        if options.keep_blocks or id(w) in embeddings:
            native.packed(lib, w)  # at load rather than in the first step
        else:
            native.release_blocks(lib, w)


def _is_quantized(value) -> bool:
    return not isinstance(value, torch.Tensor)


def _shape(value) -> tuple[int, ...]:
    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    parts = value if isinstance(value, tuple) else (value,)
    return (sum(w.shape[0] for w in parts), parts[0].shape[1])


def _check_names_and_shapes(model: nn.Module, state: dict, source: str) -> None:
    expected = {name: p.shape for name, p in model.state_dict().items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise TinyLLMError(
            f"{source!r} does not match a {model.config.family} model of its config: "
            f"missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    for name, shape in expected.items():
        if _shape(state[name]) != tuple(shape):
            raise TinyLLMError(f"{source!r}: tensor {name} has shape {_shape(state[name])}, expected {tuple(shape)}")


def _place_quantized(model: nn.Module, state: dict, dtype: torch.dtype) -> None:
    """Swap the module owning each quantized weight for its quantized twin (a tied head shares the
    embedding's QuantWeight object, so it is held once)."""
    for name, value in state.items():
        if _is_quantized(value):
            path = name.removesuffix(".weight")
            is_embedding = path.endswith("embed_tokens")
            linear = BiasedQuantLinear if f"{path}.bias" in state else QuantLinear
            model.set_submodule(path, QuantEmbedding(value, dtype) if is_embedding else linear(value))


def build_model(
    config: ModelConfig,
    state: dict,
    device: torch.device | str,
    source: str,
    dtype: torch.dtype = torch.float32,
    plan: ModelPlan | None = None,
) -> LlamaForCausalLM:
    """Put loaded weights (float tensors, or QuantWeights kept as blocks) into a model without allocating
    them twice; nothing is half-loaded on error. plan: the model's, where not its config's (model_plan)."""
    with torch.device("meta"):
        model = LlamaForCausalLM(config, plan)
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
        state["lm_head.weight"] = state.get("model.embed_tokens.weight")
    _check_names_and_shapes(model, state, source)
    _place_quantized(model, state, dtype)
    floats = {k: v.to(device) for k, v in state.items() if not _is_quantized(v)}
    model.load_state_dict(floats, assign=True, strict=True)
    if config.tie_word_embeddings and not _is_quantized(state["lm_head.weight"]):
        model.lm_head.weight = model.model.embed_tokens.weight
    full, local = rotary_tables(config)
    model.rotary, model.rotary_local = full.to(device), None if local is None else local.to(device)
    return model.eval().requires_grad_(False)


def _parts_packer(state: dict, options: WeightOptions, native_weights: bool):
    """Where the blocks of weights with integer activations are to be released (`_int8_activations`): a
    function that packs a fused projection straight from its parts (`native.pack_parts`), sparing the stacked
    copy of their blocks; else None."""
    if not native_weights or options.keep_blocks or options.quantize:
        return None
    lib = native.library()
    weights = [v for v in state.values() if isinstance(v, QuantWeight)]
    if lib is None or not weights or _activation_limbs(options, weights) is None:
        return None
    return lambda parts: native.pack_parts(lib, parts)


def _finish_state(state: dict, options: WeightOptions, native_weights: bool, source: str) -> dict:
    """Fuse projections, then quantize a float model if asked (dequantized again for the reference path)."""
    state = fuse(state, source, _parts_packer(state, options, native_weights))
    if options.quantize is None:
        return state
    state = quantize_state(state, options.quantize, source)
    if not native_weights:
        return {k: v if isinstance(v, torch.Tensor) else dequantize(v) for k, v in state.items()}
    return state


def _type_counts(state: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in {id(v): v for v in state.values()}.values():
        kinds = (
            [str(value.dtype).removeprefix("torch.")]
            if isinstance(value, torch.Tensor)
            else [w.fmt for w in (value if isinstance(value, tuple) else (value,))]
        )
        for kind in kinds:
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def _refuse_split(path: str, metadata: dict) -> None:
    """One file of a split GGUF (llama.cpp's gguf-split) holds some of the tensors only: refused by its header."""
    count = metadata.get("split.count", 1)
    if isinstance(count, int) and count > 1:
        part = metadata.get("split.no", 0) + 1
        raise TinyLLMError(
            f"{path!r} is part {part} of a GGUF split into {count} files, which tinyllm cannot load; merge them with "
            "llama.cpp's llama-gguf-split --merge and give the merged file"
        )


def _load_gguf(path: str, dtype, device, options: WeightOptions) -> LoadedModel:
    g = open_gguf(path)
    _refuse_split(path, g.metadata)
    config = config_from_gguf(g)
    quantized = sorted({g.tensor_type(n) for n in g.tensors} - {"F32", "F16", "BF16"})
    if options.quantize and quantized:
        raise TinyLLMError(
            f"quantize={options.quantize!r} needs float weights, but {path!r} already holds "
            f"{', '.join(quantized)} tensors"
        )
    native_weights = options.native_on(device)
    tokenizer = Tokenizer.from_gguf_metadata(g.metadata)
    types: dict[str, int] = {}
    for name in g.tensors:
        types[g.tensor_type(name)] = types.get(g.tensor_type(name), 0) + 1
    state = _finish_state(state_dict_from_gguf(g, config, dtype, native_weights), options, native_weights, path)
    if options.quantize:
        types = _type_counts(state)
    model = build_model(config, state, device, path, dtype)
    _int8_activations(model, options, path)
    del state
    if g.mapping is not None:
        release_unread_pages(g.mapping, model)
    return LoadedModel(path, "gguf", config, model, tokenizer, tokenizer.stop_ids, types)


def _hf_eos_ids(folder: str, tokenizer: Tokenizer) -> tuple[int, ...]:
    ids = set(tokenizer.stop_ids)
    gen_path = os.path.join(folder, "generation_config.json")
    if os.path.isfile(gen_path):
        eos = read_json(gen_path).get("eos_token_id")
        ids.update([eos] if isinstance(eos, int) else (eos or []))
    return tuple(sorted(ids))


def _load_hf(folder: str, dtype, device, options: WeightOptions) -> LoadedModel:
    config = config_from_hf(folder)
    native_weights = options.native_on(device)
    tokenizer = Tokenizer.from_hf_folder(folder)
    raw = our_tensors(state_dict_from_hf(folder, dtype), FAMILIES[config.family])
    types = {str(dtype).removeprefix("torch."): len(raw)}
    state = _finish_state(raw, options, native_weights, folder)
    if options.quantize:
        types = _type_counts(state)
    model = build_model(config, state, device, folder, dtype)
    _int8_activations(model, options, folder)
    return LoadedModel(folder, "safetensors", config, model, tokenizer, _hf_eos_ids(folder, tokenizer), types)


def load(
    path: str | os.PathLike | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    weights: str | None = None,
    quantize: str | None = None,
    keep_blocks: bool = False,
) -> LoadedModel:
    """weights: "native" | "native-int8" | "native-int24" | "dequantized" | None (`default_cpu_weights` on the
    CPU); quantize: None | "int8" | "int4". keep_blocks: keep the blocks of weights with integer activations
    (a model to be sharded)."""
    try:
        options = WeightOptions(weights, quantize, keep_blocks)
    except ValueError as exc:
        raise TinyLLMError(str(exc)) from None
    path = resolve_model(path)
    if os.path.isdir(path):
        return _load_hf(path, dtype, device, options)
    if not os.path.exists(path):
        raise TinyLLMError(f"model path {path!r} does not exist (expected a .gguf file or a Hugging Face folder)")
    return _load_gguf(path, dtype, device, options)
