"""The rules a SamplingParams field's value follows: each checks and normalises a value, raising TinyLLMError
whose message names the field and the value, and says what kind of value it is (`kind`), which each front reads
to pick its own type for the field (a float flag, a JSON integer, a list of strings, ...).

Bools are refused where numbers are expected, because `True` silently meaning `1` hides caller bugs. Nothing here
imports torch: the command line builds its flags from these rules before anything heavy loads.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tinyllm.errors import TinyLLMError


def is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class Real:
    """A real number that `ok` accepts; `expected` says which, after "must be"."""

    ok: Callable[[float], bool]
    expected: str
    kind = "number"

    def check(self, name: str, value: Any, params: Any) -> float:
        # written as ok(v), not a negated range test, so NaN (all comparisons False) fails
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not self.ok(float(value)):
            raise TinyLLMError(f"{name} must be {self.expected}, got {value!r}")
        return float(value)


@dataclass(frozen=True)
class Int:
    """An integer in [lo, hi] (hi None: no upper bound), also None where `optional`; `expected` says which in
    the library's words, `flag_expected` in the command line's where they are not "at least lo" / "lo..hi"."""

    lo: int
    hi: int | None
    expected: str
    optional: bool = False
    flag_expected: str | None = None
    kind = "integer"

    def accepts(self, value: int) -> bool:
        return self.lo <= value and (self.hi is None or value <= self.hi)

    def check(self, name: str, value: Any, params: Any) -> int | None:
        if value is None and self.optional:
            return None
        if not is_int(value) or not self.accepts(int(value)):
            raise TinyLLMError(f"{name} must be {self.expected}, got {value!r}")
        return int(value)


@dataclass(frozen=True)
class TopK(Int):
    """top_k: -1 is the OpenAI/vLLM spelling of "off", normalised to 0."""

    def check(self, name: str, value: Any, params: Any) -> int:
        return max(super().check(name, value, params), 0)


@dataclass(frozen=True)
class AtMostMaxTokens(Int):
    """min_tokens: an integer that is also at most the request's max_tokens."""

    def check(self, name: str, value: Any, params: Any) -> int:
        number = super().check(name, value, params)
        max_tokens = params.max_tokens
        if is_int(max_tokens) and number > int(max_tokens):
            raise TinyLLMError(f"{name} must be at most max_tokens ({max_tokens}), got {value!r}")
        return number


@dataclass(frozen=True)
class Flag:
    """A bool, and only a bool."""

    kind = "bool"

    def check(self, name: str, value: Any, params: Any) -> bool:
        if not isinstance(value, bool):
            raise TinyLLMError(f"{name} must be a bool, got {value!r}")
        return value


@dataclass(frozen=True)
class Strings:
    """Non-empty strings: one string or a list of them, normalised to a tuple."""

    kind = "strings"

    def check(self, name: str, value: Any, params: Any) -> tuple[str, ...]:
        items = (value,) if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) and s for s in items):
            raise TinyLLMError(f"{name} must be a non-empty string or a list of them, got {value!r}")
        return tuple(items)


@dataclass(frozen=True)
class TokenIds:
    """A list of token ids (integers >= 0), normalised to a tuple."""

    kind = "ids"

    def check(self, name: str, value: Any, params: Any) -> tuple[int, ...]:
        if not isinstance(value, (list, tuple)) or not all(is_int(t) and t >= 0 for t in value):
            raise TinyLLMError(f"{name} must be a list of integers >= 0, got {value!r}")
        return tuple(int(t) for t in value)


@dataclass(frozen=True)
class Bias:
    """Token id -> bias (sampling/logit_bias.py), normalised to sorted pairs."""

    kind = "bias"

    def check(self, name: str, value: Any, params: Any):
        from tinyllm.sampling.logit_bias import normalise_logit_bias  # torch: loaded by the first request

        return normalise_logit_bias(value)


@dataclass(frozen=True)
class Constraint:
    """None or a StructuredOutput, which ends with EOS and so cannot be combined with ignore_eos."""

    kind = "constraint"

    def check(self, name: str, value: Any, params: Any):
        from tinyllm.grammar.structured import StructuredOutput

        if value is not None and not isinstance(value, StructuredOutput):
            raise TinyLLMError(f"{name} must be None or a StructuredOutput, got {type(value).__name__}")
        # The grammar ends the text with EOS; a request that ignores EOS would run past the grammar's end.
        if value is not None and params.ignore_eos is True:
            raise TinyLLMError("ignore_eos cannot be combined with structured output, whose end is an EOS token")
        return value


Rule = Real | Int | Flag | Strings | TokenIds | Bias | Constraint
