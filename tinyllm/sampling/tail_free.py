"""Tail-free sampling (Trenton Bricken, 2019; Ollama's `tfs_z`, llama.cpp's until 2024): sort the probabilities in
descending order, take the absolute second differences of that curve, normalise them to sum 1 (all equal when
the curve is straight: a sum of at most 1e-6), and cut the tail where their running sum first passes z (the
tokens before that point stay, at least one). A filter of the sampling stack, after top-k (filters.py)."""

from __future__ import annotations

import torch
from torch import Tensor

from tinyllm.errors import TinyLLMError

_FLAT = 1e-6  # second differences summing to no more than this: a straight curve, weighed evenly


def tail_free_filter(logits: Tensor, z: float) -> Tensor:
    """logits [V] or [B, V] with -inf where dropped; 1 disables. Equal logits keep the vocabulary's order (a
    stable sort); a row of at most two live tokens is left whole."""
    if not 0 < z <= 1:
        raise TinyLLMError(f"tfs_z must be in (0, 1], got {z!r}")
    vocab = logits.shape[-1]
    if z == 1.0 or vocab <= 2:
        return logits.clone()
    rows = logits.reshape(-1, vocab).double()  # [B, V]
    order = torch.sort(rows, dim=-1, descending=True, stable=True).indices  # [B, V]; dropped last
    probs = torch.softmax(rows, dim=-1).gather(-1, order)  # [B, V] descending
    num_live = (rows > float("-inf")).sum(dim=-1, keepdim=True)  # [B, 1]
    first = probs[:, :-1] - probs[:, 1:]  # [B, V-1]
    second = (first[:, :-1] - first[:, 1:]).abs()  # [B, V-2]
    j = torch.arange(vocab - 2, device=rows.device)  # [V-2]
    live = j < num_live - 2  # [B, V-2]: the differences among live tokens
    second = torch.where(live, second, 0.0)
    total = second.sum(dim=-1, keepdim=True)  # [B, 1]
    even = live / (num_live - 2).clamp(min=1)  # [B, V-2]
    weights = torch.where(total > _FLAT, second / total.clamp(min=_FLAT), even)  # [B, V-2]
    cut = (weights.cumsum(dim=-1) > z) & (j >= 1) & live  # [B, V-2]
    num_keep = torch.where(cut.any(dim=-1, keepdim=True), cut.int().argmax(dim=-1, keepdim=True), num_live)  # [B, 1]
    keep_sorted = torch.arange(vocab, device=rows.device) < num_keep  # [B, V]
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # [B, V] in vocabulary order
    return logits.masked_fill(~keep.reshape(logits.shape), float("-inf"))
