"""Mirostat (Basu et al., 2021; llama.cpp's and Ollama's `mirostat` 1 and 2): sampling that steers the surprise
of the chosen tokens towards a target `tau` with a feedback value `mu` that each request carries.

Terms: a token's surprise is -log2 p, in bits, p its probability in the distribution it is drawn from. mu starts
at 2 * tau; after each draw, mu <- mu - eta * (surprise - tau). Before the draw:
- v1 fits the exponent s of a Zipf law to the m = 100 most likely tokens (s_hat, least squares on the log-ratios
  of neighbours), computes from it and mu the k whose top-k would give a surprise of mu, and keeps the top k;
- v2 keeps the tokens whose surprise is at most mu (the most likely one when none is).
Where llama.cpp leaves it to chance or to float32 we choose: the fit and the cut are in float64, v1 fits on the
live tokens only (a token a grammar dropped has p = 0, which would make s_hat infinite), keeps the ties at its
k-th logit as our top-k does (llama.cpp keeps k after an unstable sort), and takes the limits of its formula
where it would divide by zero (see v1_k).

Mirostat takes the place of top-k, tail-free, typical, top-p and min-p, as in llama.cpp; the grammar mask, the
min_tokens hold-back, logit bias, penalties and temperature come before it (filters.py). At temperature 0 the
token is the argmax and mirostat has nothing to do. mu is a function of the request's accepted tokens alone, so
a request keeps it per output position (`MuTrail`): a request that goes back to a position (a rejected draft, a
recompute after preemption) samples it again with the mu it had there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from tinyllm.errors import TinyLLMError

MIROSTAT_M = 100  # the most likely tokens s_hat is fitted on (llama.cpp's m)
_LN2 = math.log(2.0)


def start_mu(tau: float) -> float:
    return 2.0 * tau


def mirostat_filter(logits: Tensor, mu: Tensor, version: int) -> Tensor:
    """logits [B, V] (after temperature) with -inf where mirostat drops a token; mu [B], each row's own."""
    if version not in (1, 2):
        raise TinyLLMError(f"mirostat must be 1 or 2 here, got {version!r}")
    rows = logits.double()  # [B, V]
    log_probs = torch.log_softmax(rows, dim=-1)  # [B, V]; -inf where dropped
    mu = mu.to(torch.float64).reshape(-1, 1)  # [B, 1]
    keep = _v1_keep(rows, log_probs, mu) if version == 1 else _v2_keep(log_probs, mu)
    return logits.masked_fill(~keep, float("-inf"))


def _v2_keep(log_probs: Tensor, mu: Tensor) -> Tensor:
    """keep [B, V]: surprise <= mu, or the first most likely token of a row that keeps nothing."""
    keep = -log_probs / _LN2 <= mu  # [B, V]; a dropped token's surprise is inf
    top = torch.zeros_like(keep).scatter(-1, log_probs.argmax(dim=-1, keepdim=True), True)  # [B, V]
    return keep | (top & ~keep.any(dim=-1, keepdim=True))


def _v1_keep(rows: Tensor, log_probs: Tensor, mu: Tensor) -> Tensor:
    """keep [B, V]: each row's top k (ties at the k-th logit kept), k from s_hat and mu."""
    k = v1_k(log_probs, mu.reshape(-1))  # [B]
    ordered = torch.topk(rows, int(k.max()), dim=-1).values  # [B, max k], descending: k is often small
    kth = ordered.gather(-1, (k - 1).reshape(-1, 1))  # [B, 1]
    return (rows >= kth) & (rows > float("-inf"))


def v1_k(log_probs: Tensor, mu: Tensor) -> Tensor:
    """k [B] (int64, in [1, V]) for log-probabilities [B, V] and mu [B]. With fewer than two live tokens s_hat is
    0/0 and k is 1; the limits of the formula stand where it divides by zero (s_hat = 1: eps / (1 - V^-eps) ->
    1 / ln V; s_hat = 0: k is V or 1 as the numerator is above or below 1)."""
    vocab = log_probs.shape[-1]
    m = min(MIROSTAT_M, vocab)
    top = torch.topk(log_probs, m, dim=-1).values  # [B, m] descending
    i = torch.arange(m - 1, dtype=torch.float64, device=log_probs.device)  # [m-1]
    t = torch.log((i + 2) / (i + 1))  # [m-1]
    b = top[:, :-1] - top[:, 1:]  # [B, m-1]: ln(p_i / p_{i+1})
    num_live = (log_probs > float("-inf")).sum(dim=-1, keepdim=True)  # [B, 1]
    pairs = i < num_live - 1  # [B, m-1]: both tokens of the pair live
    s_hat = torch.where(pairs, t * b, 0.0).sum(-1) / torch.where(pairs, t * t, 0.0).sum(-1)  # [B]
    eps = s_hat - 1
    ln_v = math.log(max(vocab, 2))  # a one-token vocabulary has s_hat = 0/0 and k = 1 whatever this is
    ratio = torch.where(eps == 0, 1 / ln_v, eps / -torch.expm1(-eps * ln_v))  # [B]: eps / (1 - V^-eps)
    log_k = (mu.to(torch.float64) * _LN2 + torch.log(ratio)) / s_hat  # [B]
    k = torch.exp(log_k.clamp(max=ln_v + 1)).nan_to_num(nan=1.0)  # [B]; capped past V before exp overflows
    return k.floor().clamp(1, vocab).long()


def surprise_bits(filtered: Tensor, tokens: Tensor) -> Tensor:
    """-log2 p [B] of tokens [B] in the distributions of filtered logits [B, V], in float64."""
    log_probs = torch.log_softmax(filtered.double(), dim=-1)  # [B, V]
    return -log_probs.gather(-1, tokens.reshape(-1, 1)).reshape(-1) / _LN2


def next_mu(mu, surprise, tau: float, eta: float):
    """mu after a draw of the given surprise (floats, or tensors [B] of each row's)."""
    return mu - eta * (surprise - tau)


@dataclass
class MuTrail:
    """A request's mu at each output position: mus[t] samples output token t (mus[0] = 2 * tau)."""

    mus: list[float]

    @classmethod
    def start(cls, tau: float) -> MuTrail:
        return cls([start_mu(tau)])

    def at(self, position: int) -> float:
        return self.mus[position]

    def record(self, position: int, mu_after: float) -> None:
        """Output token `position` was accepted: the mu after its draw samples position + 1. Values past it (from
        positions a rollback left) go, so the trail is always the accepted tokens' own."""
        self.mus[position + 1 :] = [mu_after]
