"""The model's architecture, read from metadata (GGUF `{arch}.*` keys or config.json)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from .errors import TinyLLMError

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def parse_dtype(value: str | torch.dtype, what: str = "dtype") -> torch.dtype:
    """A dtype name ("float32", "float16", "bfloat16") or one of those torch dtypes -> the torch dtype."""
    if isinstance(value, torch.dtype) and value in DTYPES.values():
        return value
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    raise TinyLLMError(f"{what} must be one of {', '.join(DTYPES)}, got {value!r}")


# What a KV cache can store: the float dtypes, or "q8_0" (int8 values with a float16 scale per 32, cache/q8_kv.py)
KV_DTYPES = {**DTYPES, "q8_0": torch.int8}


def parse_kv_dtype(value: str | torch.dtype) -> torch.dtype:
    """A KV dtype name ("float32", "float16", "bfloat16", "q8_0") or its torch dtype (q8_0: torch.int8)."""
    if isinstance(value, torch.dtype) and value in KV_DTYPES.values():
        return value
    if isinstance(value, str) and value in KV_DTYPES:
        return KV_DTYPES[value]
    raise TinyLLMError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {value!r}")


def kv_dtype_name(dtype: torch.dtype) -> str:
    """The name parse_kv_dtype reads back: "q8_0" for torch.int8, else the dtype's own."""
    return next(name for name, d in KV_DTYPES.items() if d == dtype)


ROPE_SCALING_KINDS = ("linear", "llama3", "yarn")


@dataclass(frozen=True)
class RopeScaling:
    """Rotary frequency scaling: "linear" divides every frequency by factor; "llama3" divides the low
    frequencies by factor, keeps the high ones and blends between (Llama 3.1's scheme); "yarn" does the same
    with a ramp over the dims between beta_fast and beta_slow rotations in the original context, and scales
    cos and sin by an attention factor (given, or 0.1·ln(factor) + 1, or its mscale ratio; YaRN's paper)."""

    kind: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    beta_fast: float = 32.0  # yarn: rotations in the original context from which dims keep their frequency
    beta_slow: float = 1.0  # yarn: rotations below which dims are divided by factor
    truncate: bool = True  # yarn: the ramp's ends rounded outwards to whole dims
    attention_factor: float | None = None  # yarn: cos and sin times this; None = from factor and the mscales
    mscale: float | None = None  # yarn: DeepSeek's numerator and denominator of the attention factor
    mscale_all_dim: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ROPE_SCALING_KINDS:
            raise ValueError(f"rope scaling kind must be one of {', '.join(ROPE_SCALING_KINDS)}, got {self.kind!r}")
        if not self.factor > 0:
            raise ValueError(f"rope scaling factor must be positive, got {self.factor!r}")
        if self.kind == "llama3" and not 0 < self.low_freq_factor < self.high_freq_factor:
            raise ValueError(
                f"llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor, got "
                f"{self.low_freq_factor} and {self.high_freq_factor}"
            )
        if self.kind == "yarn" and not 0 < self.beta_slow <= self.beta_fast:
            raise ValueError(
                f"yarn rope scaling needs 0 < beta_slow <= beta_fast, got {self.beta_slow} and {self.beta_fast}"
            )

    @property
    def yarn_attention_factor(self) -> float:
        """What YaRN multiplies cos and sin by: given, or 0.1·m·ln(factor) + 1 (a ratio of two with both mscales)."""
        if self.attention_factor is not None:
            return self.attention_factor

        def mscale(m: float = 1.0) -> float:
            return 1.0 if self.factor <= 1 else 0.1 * m * math.log(self.factor) + 1.0

        if self.mscale and self.mscale_all_dim:
            return mscale(self.mscale) / mscale(self.mscale_all_dim)
        return mscale()


LAYER_KINDS = ("full", "sliding")


@dataclass(frozen=True)
class ExpertConfig:
    """A mixture of experts in place of the dense MLP: num_experts gated MLPs of intermediate_size each, top_k of
    them per token, their weights renormalised to sum to one where `renormalize` (HF's norm_topk_prob)."""

    num_experts: int
    top_k: int
    intermediate_size: int
    renormalize: bool = False
    dense_layers: tuple[int, ...] = ()  # layers that keep a dense MLP (HF's mlp_only_layers, decoder_sparse_step)

    def __post_init__(self) -> None:
        for name in ("num_experts", "top_k", "intermediate_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"experts' {name} must be a positive integer, got {value!r}")
        if self.top_k > self.num_experts:
            raise ValueError(f"experts' top_k must be at most num_experts={self.num_experts}, got {self.top_k}")


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of a decoder of one of the families in model/family.py. Validates itself on
    construction. Layers are "full" (attend to every earlier position) or "sliding" (the last
    sliding_window positions, the query's own included)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    rope_theta: float = 10000.0
    rope_dim: int | None = None  # rotated dims per head; None means all of head_dim
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    architecture: str = "llama"  # as the source names it (model_type or general.architecture)
    family: str = "llama"  # a key of model/family.py's FAMILIES
    attention_bias: bool = False  # q, k and v projections carry biases
    rope_scaling: RopeScaling | None = None
    rope_freq_factors: tuple[float, ...] | None = None  # [R/2] divisors of the frequencies (GGUF rope_freqs)
    local_rope_theta: float | None = None  # sliding layers' rotary base, where it differs from rope_theta
    sliding_window: int | None = None
    layer_kinds: tuple[str, ...] = field(default=())  # per layer; () means every layer full
    query_scale: float | None = None  # multiplies q·k; None means 1/sqrt(head_dim)
    attn_softcap: float | None = None  # attention logits become cap·tanh(logit/cap)
    final_softcap: float | None = None  # the same on the output logits
    experts: ExpertConfig | None = None  # a mixture of experts' MLPs; None = every layer's MLP dense
    swiglu_limit: float | None = None  # the clamped SwiGLU's clamp (gpt-oss); None = the family's
    swiglu_alpha: float | None = None  # its sigmoid gain; None = the family's

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.rope_theta <= 0:
            raise ValueError(f"rope_theta must be positive, got {self.rope_theta}")
        rope_dim = self.head_dim if self.rope_dim is None else self.rope_dim
        if rope_dim <= 0 or rope_dim > self.head_dim or rope_dim % 2:
            raise ValueError(f"rope_dim must be even and in (0, head_dim={self.head_dim}], got {rope_dim}")
        if self.rms_norm_eps <= 0:
            raise ValueError(f"rms_norm_eps must be positive, got {self.rms_norm_eps}")
        self._check_layers()
        for name in (
            "local_rope_theta",
            "query_scale",
            "attn_softcap",
            "final_softcap",
            "swiglu_limit",
            "swiglu_alpha",
        ):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive or None, got {value!r}")
        if self.rope_freq_factors is not None and len(self.rope_freq_factors) != rope_dim // 2:
            raise ValueError(
                f"rope_freq_factors must hold rope_dim/2 = {rope_dim // 2} values, got {len(self.rope_freq_factors)}"
            )

    def _check_layers(self) -> None:
        if self.layer_kinds and len(self.layer_kinds) != self.num_layers:
            raise ValueError(f"layer_kinds must name {self.num_layers} layers, got {len(self.layer_kinds)}")
        bad = [k for k in self.layer_kinds if k not in LAYER_KINDS]
        if bad:
            raise ValueError(f"layer kinds must be one of {', '.join(LAYER_KINDS)}, got {bad[0]!r}")
        if self.sliding_window is not None and (not isinstance(self.sliding_window, int) or self.sliding_window <= 0):
            raise ValueError(f"sliding_window must be a positive integer or None, got {self.sliding_window!r}")
        if "sliding" in self.layer_kinds and self.sliding_window is None:
            raise ValueError("layer_kinds has sliding layers but sliding_window is None")
        bad = [i for i in (self.experts.dense_layers if self.experts else ()) if not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(f"experts' dense_layers must be layers 0..{self.num_layers - 1}, got {bad[0]!r}")

    def layer_kind(self, layer: int) -> str:
        return self.layer_kinds[layer] if self.layer_kinds else "full"

    def has_experts(self, layer: int) -> bool:
        """Whether this layer's MLP is a mixture of experts."""
        return self.experts is not None and layer not in self.experts.dense_layers

    def layer_window(self, layer: int) -> int | None:
        """How many positions (the query's own included) a query of this layer sees; None = all."""
        return self.sliding_window if self.layer_kind(layer) == "sliding" else None

    @property
    def rotary_dim(self) -> int:
        return self.head_dim if self.rope_dim is None else self.rope_dim

    @property
    def context_length(self) -> int:
        return self.max_position_embeddings

    def within_context(self, ctx_size: int | None) -> ModelConfig:
        """The config a model runs under: its trained context, or less (ctx_size)."""
        if ctx_size is None:
            return self
        if isinstance(ctx_size, bool) or not isinstance(ctx_size, int) or not 1 <= ctx_size <= self.context_length:
            raise TinyLLMError(
                f"ctx_size must be an integer from 1 to the model's trained context of {self.context_length}, "
                f"got {ctx_size!r}"
            )
        return replace(self, max_position_embeddings=ctx_size)

    def kv_bytes_per_token(self, itemsize: float = 4) -> int:
        """Bytes of K and V one position costs across all layers: 2·L·Hkv·D·itemsize (a q8_0 value: 1 + 2/32)."""
        return int(2 * self.num_layers * self.num_kv_heads * self.head_dim * itemsize)
