"""The logits pipeline of the sampling stack, applied in this order:

0. logit_bias: each listed token's bias added to its raw logit (logit_bias.py);
1. repetition penalty, over the prompt AND the generated ids: a seen token's logit is
   divided by the penalty when positive, multiplied when negative (CTRL / HF rule);
2. presence and frequency penalties, over the generated ids only: subtract
   `presence` once per distinct generated token and `frequency * count`;
3. temperature: divide the logits (temperature 0 = greedy stops here; the caller takes
   the argmax of the penalised logits);
4. top-k: keep every token whose logit is >= the k-th largest (ties at the edge kept); then tail-free
   (tail_free.py) and locally typical (typical.py) sampling;
5. top-p: drop a token iff the probability mass strictly before it, in descending
   order of logit (lower index first among equal logits), is already >= p;
6. min-p: keep tokens with probability >= min_p * p_max.

With mirostat (mirostat.py), mirostat v1 or v2 follows temperature in place of steps 4-6, as in llama.cpp.

Every step takes logits and returns a NEW tensor of logits with -inf where a token is
dropped, so the steps compose: each filter sees the renormalised distribution left by
the one before. Filters accept [V] or [B, V] rows with one parameter for every row;
penalties act on one request's [V] row. Masks are computed in float32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from tinyllm.errors import TinyLLMError
from tinyllm.sampling.logit_bias import apply_logit_bias
from tinyllm.sampling.mirostat import mirostat_filter, start_mu
from tinyllm.sampling.params import SamplingParams
from tinyllm.sampling.tail_free import tail_free_filter
from tinyllm.sampling.typical import typical_filter

# Probabilities carry float32 rounding (~1e-7), so a mass or ratio that equals p only up
# to rounding counts as reaching it: the result then does not depend on summation order
# (a shuffled row keeps the same set) and matches the exact-arithmetic rule.
_MASS_TOL = 1e-6
_RATIO_RTOL = 1e-6
_FIRST_TOP_P_CANDIDATES = 256  # the nucleus usually fits here, avoiding a full sort of V


def _check_logits(logits: Tensor, dims: tuple[int, ...] = (1, 2)) -> None:
    if not isinstance(logits, Tensor) or not logits.is_floating_point():
        raise TinyLLMError(f"logits must be a floating-point tensor, got {type(logits).__name__}")
    if logits.dim() not in dims or logits.shape[-1] == 0:
        raise TinyLLMError(
            f"logits must have shape {'[V] or [B, V]' if 2 in dims else '[V]'} with V >= 1, got {tuple(logits.shape)}"
        )


def _as_id_tensor(ids: Sequence[int] | Tensor, vocab_size: int, device: torch.device) -> Tensor:
    """Token ids as a 1-D int64 tensor, checked to lie in [0, vocab_size)."""
    if isinstance(ids, Tensor):
        t = ids.to(device=device, dtype=torch.long).reshape(-1)
    else:
        t = torch.tensor(list(ids), dtype=torch.long, device=device)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= vocab_size):
        raise TinyLLMError(f"token ids must be in [0, {vocab_size}), got range [{int(t.min())}, {int(t.max())}]")
    return t


def apply_penalties(
    logits: Tensor, params: SamplingParams, prompt_ids: Sequence[int] | Tensor, generated_ids: Sequence[int] | Tensor
) -> Tensor:
    """Repetition (prompt + generated), then presence/frequency (generated only); with penalty_last_n, only the
    sequence's last n tokens count (as llama.cpp's and Ollama's repeat_last_n)."""
    _check_logits(logits, dims=(1,))
    out = logits.clone()  # never modify the caller's logits
    frequency_or_presence = params.presence_penalty != 0.0 or params.frequency_penalty != 0.0
    if params.repetition_penalty == 1.0 and not frequency_or_presence:
        return out  # the common case: no id conversion at all
    if params.penalty_last_n is not None:
        prompt_ids, generated_ids = _last_n(prompt_ids, generated_ids, params.penalty_last_n)
    vocab, device = logits.shape[-1], logits.device
    generated = _as_id_tensor(generated_ids, vocab, device)
    if params.repetition_penalty != 1.0:
        prompt = _as_id_tensor(prompt_ids, vocab, device)
        seen = torch.unique(torch.cat([prompt, generated]))  # [n_seen]
        values = out[seen]  # [n_seen]
        out[seen] = torch.where(values > 0, values / params.repetition_penalty, values * params.repetition_penalty)
    if frequency_or_presence and generated.numel():
        tokens, counts = torch.unique(generated, return_counts=True)  # [n_distinct] each
        out[tokens] -= counts.to(out.dtype) * params.frequency_penalty + params.presence_penalty
    return out


def _last_n(prompt_ids, generated_ids, n: int):
    """The last n tokens of prompt + generated, still split where the answer begins."""
    num_generated = len(generated_ids)
    if n <= num_generated:
        return prompt_ids[:0], generated_ids[num_generated - n :]
    return prompt_ids[max(0, len(prompt_ids) - (n - num_generated)) :], generated_ids


def apply_temperature(logits: Tensor, temperature: float) -> Tensor:
    """logits / temperature, shifted so the row max is 0.

    The shift leaves the softmax unchanged but stops a tiny temperature from overflowing
    the largest logits to inf (and the softmax to inf - inf = NaN).
    """
    _check_logits(logits)
    if not 0 < temperature < float("inf"):
        raise TinyLLMError(f"temperature must be a finite number > 0 here, got {temperature!r}")
    row_max = logits.amax(dim=-1, keepdim=True)  # [V] -> [1] or [B, V] -> [B, 1]
    return (logits - row_max) / temperature


def top_k_filter(logits: Tensor, top_k: int) -> Tensor:
    """Keep the tokens whose logit is >= the k-th largest; 0 disables."""
    _check_logits(logits)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise TinyLLMError(f"top_k must be an integer >= 0, got {top_k!r}")
    if top_k == 0 or top_k >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # [1] or [B, 1]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: Tensor, top_p: float) -> Tensor:
    """Nucleus filter; works on unsorted rows and always keeps the argmax; 1 disables."""
    _check_logits(logits)
    if not 0 < top_p <= 1:
        raise TinyLLMError(f"top_p must be in (0, 1], got {top_p!r}")
    if top_p == 1.0:  # no token has mass >= 1 strictly before it; skip the rounding risk
        return logits.clone()
    rows = logits.reshape(-1, logits.shape[-1]).float()  # [B, V]
    keep = _nucleus_mask(rows, torch.softmax(rows, dim=-1), top_p)  # [B, V]
    return logits.masked_fill(~keep.reshape(logits.shape), float("-inf"))


def _nucleus_mask(rows: Tensor, probs: Tensor, top_p: float) -> Tensor:
    """keep[b, v] for logits rows [B, V] and their probs; equal to a stable descending sort
    of the logits, mark, scatter back.

    Tokens are ordered by logit, not probability: distinct logits can round to equal
    float32 probabilities, and the argmax must stay first. Only the largest logits are
    sorted (topk), growing until every row's nucleus ends inside them: tokens outside have
    at least the nucleus's mass before them, so they drop.
    """
    vocab = rows.shape[-1]
    k = min(vocab, _FIRST_TOP_P_CANDIDATES)
    while True:
        top_logits, top_index = torch.topk(rows, k, dim=-1)  # [B, k] each, descending
        top_probs = probs.gather(-1, top_index)  # [B, k]
        # mass strictly before each, as a shifted cumsum (cumsum - top would add rounding);
        # the argmax has nothing before it, so it is always kept
        before = torch.cumsum(top_probs, dim=-1).roll(1, dims=-1)  # [B, k]
        before[:, 0] = 0.0
        n_keep = (before < top_p - _MASS_TOL).sum(dim=-1, keepdim=True).clamp(min=1)  # [B, 1]
        if k == vocab or bool((n_keep < k).all()):
            break
        k = vocab if k * 8 > vocab // 4 else k * 8  # a wide nucleus: sort the lot
    smallest_kept = top_logits.gather(-1, n_keep - 1)  # [B, 1]
    above = rows > smallest_kept  # [B, V]
    ties = rows == smallest_kept  # [B, V]
    # ties at the edge: keep the lowest-index ones, as a stable sort would put them first
    ties_to_keep = n_keep - above.sum(dim=-1, keepdim=True)  # [B, 1]
    if bool((ties.sum(dim=-1, keepdim=True) <= ties_to_keep).all()):
        return above | ties  # no row splits its ties: skip the ranking cumsum
    return above | (ties & (torch.cumsum(ties, dim=-1) <= ties_to_keep))


def min_p_filter(logits: Tensor, min_p: float) -> Tensor:
    """Keep tokens with probability >= min_p * p_max; 0 disables."""
    _check_logits(logits)
    if not 0 <= min_p <= 1:
        raise TinyLLMError(f"min_p must be in [0, 1], got {min_p!r}")
    if min_p == 0.0:
        return logits.clone()
    rows = logits.float()
    # p / p_max >= min_p compared in log space, logit - max >= log(min_p): no exp, whose
    # underflow path is slow on CPU, and no softmax needed
    shifted = rows - rows.amax(dim=-1, keepdim=True)  # [V] or [B, V], max 0
    return logits.masked_fill(shifted < math.log(min_p) + math.log1p(-_RATIO_RTOL), float("-inf"))


def apply_filters(logits: Tensor, params: SamplingParams, mu: float | None = None) -> Tensor:
    """Temperature, then top-k, tail-free, typical, top-p, min-p (steps 3-6), or mirostat with the request's mu at
    this position (None: its start, 2 * tau) in their place; not for greedy params."""
    out = apply_temperature(logits, params.temperature)
    if params.mirostat:
        rows = out.reshape(-1, out.shape[-1])  # [B, V]
        mu = start_mu(params.mirostat_tau) if mu is None else mu
        mus = torch.full(rows.shape[:1], mu, dtype=torch.float64, device=rows.device)  # [B]
        return mirostat_filter(rows, mus, params.mirostat).reshape(out.shape)
    out = top_k_filter(out, params.top_k)
    if params.tfs_z != 1.0:  # off by default: not even a copy of the row
        out = tail_free_filter(out, params.tfs_z)
    out = typical_filter(out, params.typical_p)
    out = top_p_filter(out, params.top_p)
    return min_p_filter(out, params.min_p)


def process_logits(
    logits: Tensor,
    params: SamplingParams,
    prompt_ids: Sequence[int] | Tensor,
    generated_ids: Sequence[int] | Tensor,
    mu: float | None = None,
) -> Tensor:
    """The distribution a token is drawn from, as float32 logits with -inf where dropped; `mu` is mirostat's at
    this position.

    For greedy params this is the biased, penalised logits (the argmax is taken from them).
    """
    _check_logits(logits, dims=(1,))
    biased = apply_logit_bias(logits.float(), params.logit_bias)  # [V]
    out = apply_penalties(biased, params, prompt_ids, generated_ids)
    return out if params.is_greedy else apply_filters(out, params, mu)
