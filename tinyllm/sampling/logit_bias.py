"""logit_bias: a per-request offset added to chosen tokens' raw logits, before any penalty or filter.

OpenAI's semantics: a map token id -> bias in [-100, 100], at most 300 entries; -100 in practice bans a
token and +100 all but forces it. Kept in SamplingParams as a tuple of (id, bias) pairs sorted by id, so
the params stay frozen and hashable and two equal maps compare equal.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch
from torch import Tensor

from tinyllm.errors import TinyLLMError

MAX_LOGIT_BIAS_ENTRIES = 300
LOGIT_BIAS_LIMIT = 100.0  # biases lie in [-100, 100]

LogitBias = tuple[tuple[int, float], ...]


def _is_id(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0


def _is_bias(value: Any) -> bool:
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
        and -LOGIT_BIAS_LIMIT <= float(value) <= LOGIT_BIAS_LIMIT
    )


def normalise_logit_bias(value: Any) -> LogitBias:
    """A mapping (or pairs) token id -> bias as sorted (id, bias) pairs; TinyLLMError naming the bad entry."""
    pairs = value.items() if hasattr(value, "items") else value
    try:
        pairs = [tuple(p) for p in pairs]
    except TypeError:
        raise TinyLLMError(f"logit_bias must map token ids to biases, got {value!r}") from None
    if len(pairs) > MAX_LOGIT_BIAS_ENTRIES:
        raise TinyLLMError(f"logit_bias must have at most {MAX_LOGIT_BIAS_ENTRIES} entries, got {len(pairs)}")
    out = {}
    for pair in pairs:
        if len(pair) != 2 or not _is_id(pair[0]):
            raise TinyLLMError(f"logit_bias keys must be token ids (integers >= 0), got {pair[0]!r}")
        if not _is_bias(pair[1]):
            raise TinyLLMError(f"logit_bias values must be numbers in [-100, 100], got {pair[1]!r} for token {pair[0]}")
        out[int(pair[0])] = float(pair[1])
    return tuple(sorted(out.items()))


def check_logit_bias_ids(bias: LogitBias, vocab_size: int | None) -> None:
    """Every biased id must be a token of the model."""
    if vocab_size is not None and bias and bias[-1][0] >= vocab_size:
        raise TinyLLMError(
            f"logit_bias names token {bias[-1][0]}, but the vocabulary has {vocab_size} "
            f"tokens (ids 0 to {vocab_size - 1})"
        )


def apply_logit_bias(logits: Tensor, bias: LogitBias) -> Tensor:
    """logits [V] plus the biases: a new tensor when there are any, the same one otherwise."""
    if not bias:
        return logits
    ids = torch.tensor([i for i, _ in bias], dtype=torch.long, device=logits.device)  # [n]
    values = torch.tensor([b for _, b in bias], dtype=logits.dtype, device=logits.device)  # [n]
    if int(ids[-1]) >= logits.shape[-1]:
        raise TinyLLMError(f"logit_bias names token {int(ids[-1])}, beyond the logits' {logits.shape[-1]} tokens")
    out = logits.clone()  # never modify the caller's logits
    out[ids] += values
    return out
