"""config.json -> ModelConfig for every family in model/family.py, old and new transformers layouts alike
(`rope_scaling` + `rope_theta`, or `rope_parameters`, possibly one per layer kind)."""

from __future__ import annotations

import os

from ..config import ExpertConfig, ModelConfig, RopeScaling
from ..errors import TinyLLMError
from ..model.family import Family, family_for_hf
from .hf_model import read_json
from .names import HF_ACTIVATIONS, HF_CONFIG_KEYS, HF_EXPERT_KEYS, HF_LAYER_KINDS, HF_SWIGLU_KEYS

# The rope_scaling / rope_parameters keys each scaling kind reads beside its factor (RopeScaling's fields).
_SCALING_KEYS = {
    "linear": (),
    "llama3": ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("original_max_position_embeddings", "beta_fast", "beta_slow", "truncate", "attention_factor")
    + ("mscale", "mscale_all_dim"),
}


def rope_scaling_from(params: dict | None, where: str, max_positions: int | None = None) -> RopeScaling | None:
    """A rope_scaling / rope_parameters dict -> RopeScaling (None for no scaling). YaRN without an original
    context takes max_positions, and without a factor max_positions over the original, as transformers does."""
    params = params or {}
    kind = params.get("rope_type", params.get("type", "default"))
    if kind in ("default", None):
        return None
    if kind not in _SCALING_KEYS:
        raise TinyLLMError(
            f"{where}: rope scaling of type {kind!r} is not supported, expected default, {', '.join(_SCALING_KEYS)}"
        )
    extra = {k: params[k] for k in _SCALING_KEYS[kind] if params.get(k) is not None}
    factor = params.get("factor")
    if kind == "yarn" and max_positions:  # transformers' defaults: the context as the original, their ratio
        extra.setdefault("original_max_position_embeddings", max_positions)
        factor = max_positions / extra["original_max_position_embeddings"] if factor is None else factor
    try:
        return RopeScaling(kind, float(1.0 if factor is None else factor), **extra)
    except ValueError as exc:
        raise TinyLLMError(f"{where}: {exc}") from None


def _rope(raw: dict, where: str) -> dict:
    """rope_theta, rope_scaling and local_rope_theta from either layout."""
    params = raw.get("rope_parameters") or {}
    if "full_attention" in params:  # one set per layer kind
        full, local = params["full_attention"], params.get("sliding_attention") or {}
        if rope_scaling_from(local, where) is not None:
            raise TinyLLMError(f"{where}: rope scaling on sliding layers is not supported")
        theta, local_theta = full.get("rope_theta"), local.get("rope_theta")
        scaling = rope_scaling_from(full, where, raw.get("max_position_embeddings"))
    else:
        theta = raw.get("rope_theta", params.get("rope_theta"))
        local_theta = raw.get("rope_local_base_freq")
        scaling = rope_scaling_from(raw.get("rope_scaling") or params, where, raw.get("max_position_embeddings"))
    values = {"rope_scaling": scaling, "local_rope_theta": None if local_theta is None else float(local_theta)}
    if theta is not None:
        values["rope_theta"] = float(theta)
    factor = raw.get("partial_rotary_factor", params.get("partial_rotary_factor"))
    if factor is not None and factor != 1.0:
        values["partial_rotary_factor"] = float(factor)
    return values


def _layer_kinds(raw: dict, family: Family, num_layers: int, where: str) -> tuple[str, ...]:
    if raw.get("layer_types"):
        bad = [t for t in raw["layer_types"] if t not in HF_LAYER_KINDS]
        if bad:
            raise TinyLLMError(f"{where}: layer type {bad[0]!r} is not supported, expected {', '.join(HF_LAYER_KINDS)}")
        return tuple(HF_LAYER_KINDS[t] for t in raw["layer_types"])
    if raw.get("sliding_window") is None or raw.get("use_sliding_window") is False:
        return ()
    pattern = raw.get("sliding_window_pattern", family.sliding_pattern)
    if pattern:
        return tuple("full" if (i + 1) % pattern == 0 else "sliding" for i in range(num_layers))
    if raw.get("use_sliding_window"):  # Qwen2's older layout: layers from max_window_layers on slide
        start = raw.get("max_window_layers", 0)
        return tuple("sliding" if i >= start else "full" for i in range(num_layers))
    return ("sliding",) * num_layers


def _experts(raw: dict, family: Family, num_layers: int) -> ExpertConfig | None:
    """The experts of a family that may have them: None where the config gives none (transformers then builds
    every MLP dense). A layer keeps a dense MLP when listed in mlp_only_layers or off the decoder_sparse_step."""
    values = {f: next((raw[k] for k in keys if raw.get(k) is not None), None) for f, keys in HF_EXPERT_KEYS.items()}
    if family.router is None or not values["num_experts"]:
        return None
    step, dense = raw.get("decoder_sparse_step") or 1, set(raw.get("mlp_only_layers") or ())
    values["dense_layers"] = tuple(i for i in range(num_layers) if i in dense or (i + 1) % step)
    values["renormalize"] = bool(values["renormalize"])
    return ExpertConfig(**values)


def _check_options(raw: dict, family: Family, where: str) -> None:
    method = (raw.get("quantization_config") or {}).get("quant_method")
    if method is not None:  # gpt-oss as published: MXFP4 experts as blocks and scales
        raise TinyLLMError(f"{where}: weights quantized as {method!r} are not supported, expected float weights")
    if raw.get("mlp_bias"):
        raise TinyLLMError(f"{where}: mlp_bias is not supported")
    act = raw.get("hidden_activation") or raw.get("hidden_act")
    clamped = family.activation == "clamped_swiglu"  # gpt-oss's experts: their own activation, whatever hidden_act
    if act is not None and HF_ACTIVATIONS.get(act) != family.activation and not clamped:
        raise TinyLLMError(f"{where}: hidden activation {act!r} is not supported for {family.name}")


def config_from_hf(folder: str) -> ModelConfig:
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise TinyLLMError(f"model folder {folder!r} has no config.json")
    raw = read_json(path)
    model_type = raw.get("model_type")
    family = family_for_hf(model_type)
    where = repr(path)
    _check_options(raw, family, where)
    values = {}
    for field, keys in HF_CONFIG_KEYS.items():
        for key in keys:
            if raw.get(key) is not None:
                values[field] = raw[key]
                break
    values.update(_rope(raw, where))
    values.update({field: float(raw[key]) for field, key in HF_SWIGLU_KEYS.items() if raw.get(key) is not None})
    values.setdefault("num_kv_heads", values.get("num_heads"))
    if "head_dim" not in values and "hidden_size" in values and values.get("num_heads"):
        values["head_dim"] = values["hidden_size"] // values["num_heads"]
    factor = values.pop("partial_rotary_factor", None)
    if factor is not None and "head_dim" in values:
        values["rope_dim"] = int(values["head_dim"] * factor)
    if raw.get("query_pre_attn_scalar") is not None:
        values["query_scale"] = float(raw["query_pre_attn_scalar"]) ** -0.5
    values["attention_bias"] = bool(raw.get("attention_bias")) and not family.qkv_bias
    kinds = _layer_kinds(raw, family, values.get("num_layers", 0), where)
    values["layer_kinds"] = kinds
    values["sliding_window"] = raw.get("sliding_window") if "sliding" in kinds else None
    try:
        values["experts"] = _experts(raw, family, values.get("num_layers", 0))
        return ModelConfig(architecture=model_type, family=family.name, **values)
    except (TypeError, ValueError) as exc:
        raise TinyLLMError(f"{where} is not a valid {family.name} config: {exc}") from None
