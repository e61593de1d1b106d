"""A GGUF file's metadata -> ModelConfig, for every family with a llama.cpp architecture of its own."""

from __future__ import annotations

from ..config import ExpertConfig, ModelConfig, RopeScaling
from ..errors import TinyLLMError
from ..model.family import Family, family_for_gguf
from .gguf_file import GGUFFile
from .names import GGUF_CONFIG_KEYS, GGUF_EXPERT_KEYS, GGUF_OPTIONAL_KEYS, GGUF_ROPE_FREQS, GGUF_ROUTER, GGUF_YARN_KEYS

_INTS = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim")
_INTS += ("max_position_embeddings", "rope_dim", "sliding_window")


def _rope_scaling(g: GGUFFile, got: dict, family: Family, context: int) -> RopeScaling | None:
    """Linear or YaRN scaling from the file's keys; whether YaRN's ramp is truncated, from the family."""
    kind, factor = got.get("rope_scaling_type"), got.get("rope_scaling_factor")
    if kind in (None, "none"):
        return None
    if kind not in ("linear", "yarn"):
        raise TinyLLMError(f"{g.path!r}: rope scaling of type {kind!r} is not supported, expected none, linear or yarn")
    factor = float(factor if factor is not None else 1.0)
    if kind == "linear":
        return RopeScaling("linear", factor)
    keys = {f: k.format(arch=g.architecture) for f, k in GGUF_YARN_KEYS.items()}
    yarn = {f: g.metadata[k] for f, k in keys.items() if k in g.metadata}
    original = yarn.get("original_max_position_embeddings", context)  # llama.cpp's default: the trained context
    yarn["original_max_position_embeddings"] = int(original)
    return RopeScaling("yarn", factor, truncate=family.gguf_yarn_truncate, **yarn)


def _layer_kinds(pattern, family: Family, num_layers: int) -> tuple[str, ...]:
    """A per-layer list (True = sliding), a period n (every n-th layer full), or the family's period."""
    if isinstance(pattern, (list, tuple)):
        return tuple("sliding" if p else "full" for p in pattern)
    pattern = pattern or family.sliding_pattern
    if pattern:
        return tuple("full" if (i + 1) % int(pattern) == 0 else "sliding" for i in range(num_layers))
    return ("sliding",) * num_layers


def _optional(g: GGUFFile, family: Family, values: dict) -> None:
    """Windows, soft-caps, query scale, rope scaling and the sliding layers' base, where the file has them."""
    meta, arch = g.metadata, g.architecture
    got = {f: meta[k.format(arch=arch)] for f, k in GGUF_OPTIONAL_KEYS.items() if k.format(arch=arch) in meta}
    for f in ("attn_softcap", "final_softcap", "local_rope_theta"):
        if f in got:
            values[f] = float(got[f])
    if "query_scale" in got:
        values["query_scale"] = float(got["query_scale"])
    if family.gguf_local_rope_theta is not None:
        values.setdefault("local_rope_theta", family.gguf_local_rope_theta)
    values["rope_scaling"] = _rope_scaling(g, got, family, int(values["max_position_embeddings"]))
    if got.get("sliding_window"):
        values["sliding_window"] = got["sliding_window"]
        values["layer_kinds"] = _layer_kinds(got.get("sliding_window_pattern"), family, int(values["num_layers"]))
    if GGUF_ROPE_FREQS in g.tensors:
        values["rope_freq_factors"] = tuple(float(x) for x in g.dequantize(GGUF_ROPE_FREQS).reshape(-1))
    values["attention_bias"] = "blk.0.attn_q.bias" in g.tensors and not family.qkv_bias


def _experts(g: GGUFFile, family: Family, num_layers: int) -> ExpertConfig | None:
    """expert_count and its keys, where the file has them; a layer without a router keeps a dense MLP; the
    weights are renormalised as the file's key says, else as llama.cpp does for the architecture."""
    meta, arch = g.metadata, g.architecture
    values = {f: meta.get(k.format(arch=arch)) for f, k in GGUF_EXPERT_KEYS.items()}
    if not values["num_experts"]:
        return None
    if family.router is None:  # llama.cpp writes Mixtral as a llama with experts
        key = GGUF_EXPERT_KEYS["num_experts"].format(arch=arch)
        raise TinyLLMError(
            f"{g.path!r} is a mixture of experts ({key} = {values['num_experts']}), which tinyllm "
            f"does not run for GGUF architecture {arch!r}"
        )
    missing = [GGUF_EXPERT_KEYS[f].format(arch=arch) for f in ("top_k", "intermediate_size") if values[f] is None]
    if missing:
        raise TinyLLMError(f"{g.path!r} has experts but lacks metadata {', '.join(missing)}")
    if values["renormalize"] is None:
        values["renormalize"] = family.gguf_renormalize
    values["dense_layers"] = tuple(i for i in range(num_layers) if GGUF_ROUTER.format(i=i) not in g.tensors)
    counts = ("num_experts", "top_k", "intermediate_size")
    values.update({k: int(v) for k, v in values.items() if k in counts})
    return ExpertConfig(**{**values, "renormalize": bool(values["renormalize"])})


def config_from_gguf(g: GGUFFile) -> ModelConfig:
    arch = g.architecture
    family = family_for_gguf(arch)
    meta = g.metadata
    values = {}
    for field, key in GGUF_CONFIG_KEYS.items():
        key = key.format(arch=arch)
        if key in meta:
            values[field] = meta[key]
    required = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "max_position_embeddings")
    missing = [GGUF_CONFIG_KEYS[f].format(arch=arch) for f in required if f not in values]
    if missing:
        raise TinyLLMError(f"{g.path!r} lacks metadata {', '.join(missing)}")
    values.setdefault("num_kv_heads", values["num_heads"])
    values.setdefault("head_dim", values["hidden_size"] // values["num_heads"])
    values.setdefault("vocab_size", len(meta.get("tokenizer.ggml.tokens", ())))
    values["tie_word_embeddings"] = "output.weight" not in g.tensors
    _optional(g, family, values)
    values.update({k: int(v) for k, v in values.items() if k in _INTS})
    try:
        values["experts"] = _experts(g, family, values["num_layers"])
        return ModelConfig(architecture=arch, family=family.name, **values)
    except ValueError as exc:
        raise TinyLLMError(f"{g.path!r} has an invalid config: {exc}") from None
