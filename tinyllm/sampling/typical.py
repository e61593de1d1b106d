"""Locally typical sampling (Meister et al., 2022; llama.cpp's and Ollama's `typical_p`): keep the tokens whose
surprise (-log p) is closest to the distribution's entropy, nearest first, until they hold `typical_p` of the
probability mass. A filter of the sampling stack, after top-k (sampling/filters.py)."""

from __future__ import annotations

import torch
from torch import Tensor

from tinyllm.errors import TinyLLMError


def typical_filter(logits: Tensor, typical_p: float) -> Tensor:
    """logits [V] or [B, V] with -inf where dropped; 1 disables. Ties in distance keep the vocabulary's order (a
    stable sort), and a row keeps at least its nearest token."""
    if not 0 < typical_p <= 1:
        raise TinyLLMError(f"typical_p must be in (0, 1], got {typical_p!r}")
    if typical_p == 1.0:
        return logits.clone()
    rows = logits.reshape(-1, logits.shape[-1]).float()  # [B, V]
    log_probs = torch.log_softmax(rows, dim=-1)  # [B, V]; -inf where dropped
    probs = log_probs.exp()  # [B, V]
    entropy = -(probs * log_probs.nan_to_num(neginf=0.0)).sum(dim=-1, keepdim=True)  # [B, 1]
    distance = (-log_probs - entropy).abs()  # [B, V]; inf where dropped
    order = torch.sort(distance, dim=-1, stable=True).indices  # [B, V] nearest first
    sorted_probs = probs.gather(-1, order)  # [B, V]
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # [B, V]
    keep_sorted = mass_before < typical_p  # the token that reaches typical_p is kept, those after it are not
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # [B, V] back in vocabulary order
    return logits.masked_fill(~keep.reshape(logits.shape), float("-inf"))
