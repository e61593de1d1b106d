"""SamplingParams: one request's decoding settings, validated and normalised on construction.

Every field is checked in `__post_init__`; a bad value raises TinyLLMError (a ValueError)
whose message names the field and the value. Bools are rejected where numbers are
expected because `True` silently meaning `1` hides caller bugs.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tinyllm.errors import TinyLLMError
from tinyllm.grammar.structured import StructuredOutput
from tinyllm.sampling.logit_bias import LogitBias, normalise_logit_bias

MAX_LOGPROBS = 20
_SEED_LIMIT = 2**63
# Below this temperature sampling is greedy: logits / 1e-5 already put all the mass on the argmax, and
# a smaller divisor only risks float32 overflow (vLLM draws the same line).
GREEDY_TEMPERATURE = 1e-5
# A repetition penalty divides or multiplies logits: outside this range a float32 logit overflows to inf
# or underflows to 0 and the distribution turns to NaN, and no value out there means anything useful.
REPETITION_PENALTY_RANGE = (1e-3, 1e3)


@dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token. Defaults mean plain sampling at temperature 1."""

    temperature: float = 1.0  # >= 0; below GREEDY_TEMPERATURE (1e-5) = greedy
    top_k: int = 0  # 0 (or -1, normalised to 0) = disabled; else >= 1
    top_p: float = 1.0  # (0, 1]
    typical_p: float = 1.0  # (0, 1]; 1 = off (locally typical sampling, sampling/typical.py)
    min_p: float = 0.0  # [0, 1]
    tfs_z: float = 1.0  # (0, 1]; 1 = off (tail-free sampling, sampling/tail_free.py)
    mirostat: int = 0  # 0 = off; 1 or 2: mirostat v1 / v2 in place of top-k, tfs, typical, top-p and min-p
    mirostat_tau: float = 5.0  # > 0: mirostat's target surprise, in bits per token
    mirostat_eta: float = 0.1  # > 0: how fast mirostat's mu follows the surprise of the drawn tokens
    repetition_penalty: float = 1.0  # in [1e-3, 1e3]; 1 = off
    presence_penalty: float = 0.0  # [-2, 2]
    frequency_penalty: float = 0.0  # [-2, 2]
    penalty_last_n: int | None = None  # the penalties look at the sequence's last n tokens (>= 1); None = all
    seed: int | None = None  # None -> 0 in the library; else int in [0, 2**63)
    max_tokens: int | None = 256  # >= 1; None = until the context is full
    min_tokens: int = 0  # >= 0, <= max_tokens: before this many output tokens, no stop id or stop string ends it
    stop: tuple[str, ...] = ()  # a str or list is normalised to a tuple
    stop_token_ids: tuple[int, ...] = ()  # ids >= 0
    ignore_eos: bool = False
    logprobs: int | None = None  # None = no alternatives; else 0..20
    prompt_logprobs: int | None = None  # None = off; else the prompt tokens' logprobs with 0..20 alternatives
    logit_bias: LogitBias = ()  # token id -> bias in [-100, 100] (a dict is normalised to sorted pairs)
    structured: StructuredOutput | None = None  # the text must be JSON / match a schema, regex or grammar

    def __post_init__(self) -> None:
        for name, value in _validated_fields(self).items():
            # frozen: normalised values must be written past the dataclass guard
            object.__setattr__(self, name, value)

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE

    @property
    def uses_mirostat(self) -> bool:
        """Mirostat shapes the draws (greedy takes the argmax, which every mirostat keeps)."""
        return self.mirostat != 0 and not self.is_greedy

    def replace(self, **changes: Any) -> SamplingParams:
        """A copy with `changes` applied; the copy is validated again."""
        names = {f.name for f in dataclasses.fields(self)}
        for name in changes:
            if name not in names:
                raise TinyLLMError(f"{name} is not a SamplingParams field")
        return dataclasses.replace(self, **changes)


def _validated_fields(p: SamplingParams) -> dict[str, Any]:
    """Every field checked and normalised, by name."""
    return {
        "temperature": _real("temperature", p.temperature, lambda v: 0 <= v < math.inf, "a finite number >= 0"),
        "top_k": _top_k(p.top_k),
        "top_p": _real("top_p", p.top_p, lambda v: 0 < v <= 1, "in (0, 1]"),
        "typical_p": _real("typical_p", p.typical_p, lambda v: 0 < v <= 1, "in (0, 1]"),
        "min_p": _real("min_p", p.min_p, lambda v: 0 <= v <= 1, "in [0, 1]"),
        "tfs_z": _real("tfs_z", p.tfs_z, lambda v: 0 < v <= 1, "in (0, 1]"),
        "mirostat": _mirostat(p.mirostat),
        "mirostat_tau": _real("mirostat_tau", p.mirostat_tau, lambda v: 0 < v < math.inf, "a finite number > 0"),
        "mirostat_eta": _real("mirostat_eta", p.mirostat_eta, lambda v: 0 < v < math.inf, "a finite number > 0"),
        "repetition_penalty": _real(
            "repetition_penalty",
            p.repetition_penalty,
            lambda v: REPETITION_PENALTY_RANGE[0] <= v <= REPETITION_PENALTY_RANGE[1],
            "in [{:g}, {:g}]".format(*REPETITION_PENALTY_RANGE),
        ),
        "presence_penalty": _real("presence_penalty", p.presence_penalty, lambda v: -2 <= v <= 2, "in [-2, 2]"),
        "frequency_penalty": _real("frequency_penalty", p.frequency_penalty, lambda v: -2 <= v <= 2, "in [-2, 2]"),
        "penalty_last_n": _optional_int(
            "penalty_last_n", p.penalty_last_n, lambda v: v >= 1, "None or an integer >= 1"
        ),
        "seed": _optional_int("seed", p.seed, lambda v: 0 <= v < _SEED_LIMIT, "None or an integer in [0, 2**63)"),
        "max_tokens": _optional_int("max_tokens", p.max_tokens, lambda v: v >= 1, "None or an integer >= 1"),
        "min_tokens": _min_tokens(p.min_tokens, p.max_tokens),
        "stop": _stop(p.stop),
        "stop_token_ids": _stop_token_ids(p.stop_token_ids),
        "ignore_eos": _bool("ignore_eos", p.ignore_eos),
        "logprobs": _optional_int(
            "logprobs", p.logprobs, lambda v: 0 <= v <= MAX_LOGPROBS, f"None or an integer in [0, {MAX_LOGPROBS}]"
        ),
        "prompt_logprobs": _optional_int(
            "prompt_logprobs",
            p.prompt_logprobs,
            lambda v: 0 <= v <= MAX_LOGPROBS,
            f"None or an integer in [0, {MAX_LOGPROBS}]",
        ),
        "logit_bias": normalise_logit_bias(p.logit_bias),
        "structured": _structured(p.structured, p.ignore_eos),
    }


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _real(name: str, value: Any, ok: Callable[[float], bool], expected: str) -> float:
    # written as ok(v), not a negated range test, so NaN (all comparisons False) fails
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not ok(float(value)):
        raise TinyLLMError(f"{name} must be {expected}, got {value!r}")
    return float(value)


def _optional_int(name: str, value: Any, ok: Callable[[int], bool], expected: str) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or not ok(int(value)):
        raise TinyLLMError(f"{name} must be {expected}, got {value!r}")
    return int(value)


def _min_tokens(value: Any, max_tokens: Any) -> int:
    if not _is_int(value) or int(value) < 0:
        raise TinyLLMError(f"min_tokens must be an integer >= 0, got {value!r}")
    if _is_int(max_tokens) and int(value) > int(max_tokens):
        raise TinyLLMError(f"min_tokens must be at most max_tokens ({max_tokens}), got {value!r}")
    return int(value)


def _mirostat(value: Any) -> int:
    if not _is_int(value) or int(value) not in (0, 1, 2):
        raise TinyLLMError(f"mirostat must be 0 (off), 1 or 2, got {value!r}")
    return int(value)


def _top_k(value: Any) -> int:
    if not _is_int(value) or int(value) < -1:
        raise TinyLLMError(f"top_k must be an integer >= 1, or 0 / -1 to disable, got {value!r}")
    return max(int(value), 0)  # -1 is the OpenAI/vLLM spelling of "off"


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TinyLLMError(f"{name} must be a bool, got {value!r}")
    return value


def _stop(value: Any) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) and s for s in items):
        raise TinyLLMError(f"stop must be a non-empty string or a list of them, got {value!r}")
    return tuple(items)


def _stop_token_ids(value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(_is_int(t) and t >= 0 for t in value):
        raise TinyLLMError(f"stop_token_ids must be a list of integers >= 0, got {value!r}")
    return tuple(int(t) for t in value)


def _structured(value: Any, ignore_eos: Any) -> StructuredOutput | None:
    if value is not None and not isinstance(value, StructuredOutput):
        raise TinyLLMError(f"structured must be None or a StructuredOutput, got {type(value).__name__}")
    # The grammar ends the text with EOS; a request that ignores EOS would run past the grammar's end.
    if value is not None and ignore_eos is True:
        raise TinyLLMError("ignore_eos cannot be combined with structured output, whose end is an EOS token")
    return value
