"""The proposer interface, and the settings that choose one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..errors import TinyLLMError

METHODS = ("ngram", "draft")


class Proposer(Protocol):
    """Drafts tokens that likely follow a sequence. One proposer serves one sequence at a time."""

    def propose(self, ids: Sequence[int], k: int) -> list[int]:
        """Up to k draft tokens to follow `ids` (the whole sequence so far: prompt + generated)."""

    def rollback(self, num_tokens: int) -> None:
        """The first num_tokens of the sequence stand; forget anything drafted past them."""


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str = "ngram"  # "ngram" (prompt lookup) or "draft" (a draft model)
    num_draft_tokens: int = 4  # k: drafts verified per target forward
    max_ngram: int = 3  # prompt lookup: longest suffix n-gram to match
    min_ngram: int = 2  # a 1-gram match is mostly noise: its drafts get rejected
    draft_model: str | None = None  # path of a draft model sharing the tokenizer
    draft_layers: int | None = None  # self-draft: the target's first N layers and its head
    pacing: bool = True  # draft lengths and pauses follow what was accepted (pacing.py); False: k every step

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise TinyLLMError(f"speculative method must be one of {', '.join(METHODS)}, got {self.method!r}")
        for name in ("num_draft_tokens", "max_ngram", "min_ngram"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TinyLLMError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.pacing, bool):
            raise TinyLLMError(f"pacing must be true or false, got {self.pacing!r}")
        if self.min_ngram > self.max_ngram:
            raise TinyLLMError(f"min_ngram ({self.min_ngram}) must not exceed max_ngram ({self.max_ngram})")
        if self.method == "draft" and (self.draft_model is None) == (self.draft_layers is None):
            raise TinyLLMError("the draft method needs exactly one of draft_model (a path) or draft_layers (N)")
        if self.draft_layers is not None and (
            isinstance(self.draft_layers, bool) or not isinstance(self.draft_layers, int) or self.draft_layers < 1
        ):
            raise TinyLLMError(f"draft_layers must be a positive integer, got {self.draft_layers!r}")

    @classmethod
    def of(cls, speculative) -> SpeculativeConfig | None:
        """None, a SpeculativeConfig, a method name ("ngram" / "draft"), or a dict of SpeculativeConfig fields."""
        if speculative is None or isinstance(speculative, SpeculativeConfig):
            return speculative
        if isinstance(speculative, str):
            return cls(method=speculative)
        if isinstance(speculative, dict):
            try:
                return cls(**speculative)
            except TypeError as exc:
                raise TinyLLMError(f"unknown speculative option: {exc}") from None
        raise TinyLLMError(f"speculative must be None, a method name or a SpeculativeConfig, got {speculative!r}")
