"""Drawing the next token from processed logits, and what is reported about the draw.

`sample` applies a request's grammar mask (grammar/constraint.py: forbidden tokens -> -inf), holds back the
stop ids while fewer than `min_tokens` tokens have been generated (params.stop_token_ids -> -inf; the
request puts its EOS ids there, request.py; when the grammar allows nothing but a stop id, the text is
complete and the stop ids stay), then runs
`process_logits` (logit bias -> penalties -> temperature -> top-k -> tail-free -> typical -> top-p
-> min-p, or mirostat in place of the last five, see filters.py), then either takes the argmax
(temperature 0: lowest index on ties, seed ignored) or draws by inverse CDF with ONE uniform
u = rng.uniform(position): the token is the first index, in vocab order, whose cumulative probability
exceeds u * total. The cumulative sum is float64 so the draw is exact and reproducible; a probability-0 token
can never be chosen because its cumulative value equals its predecessor's.

logprob, top_logprobs and entropy all describe the distribution the token was drawn
from (for greedy: the softmax of the penalised logits). With mirostat, the result also carries
the request's mu after this draw (mirostat.py), which samples the next position.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from tinyllm.errors import TinyLLMError
from tinyllm.grammar.constraint import Constraint
from tinyllm.kernels.greedy import greedy_rows
from tinyllm.sampling.filters import process_logits
from tinyllm.sampling.mirostat import next_mu, start_mu, surprise_bits
from tinyllm.sampling.params import SamplingParams
from tinyllm.sampling.rng import RequestRng


@dataclass
class SampleResult:
    token: int
    logprob: float  # of `token` under the distribution it was drawn from
    top_logprobs: list[tuple[int, float]] = field(default_factory=list)  # descending
    entropy: float = 0.0  # nats, of that same distribution
    mu_after: float | None = None  # mirostat's mu for the next position; None without mirostat


def _entropy_rows(logits: Tensor, logp: Tensor | None = None) -> Tensor:
    """Entropy in nats of softmax over the last dim of float logits [..., V] -> [...], float64."""
    # probabilities come from softmax, not logp.exp(): torch's exp is slow on underflow
    probs = torch.softmax(logits, dim=-1)  # [..., V]
    logp = torch.log_softmax(logits, dim=-1) if logp is None else logp  # [..., V]
    # dropped tokens have p = 0 and logp = -inf; their 0 * -inf must count as 0, not NaN
    terms = torch.where(probs > 0, probs * logp, torch.zeros_like(probs))
    return -terms.sum(dim=-1, dtype=torch.float64)


def sampled_entropy(logits_after_filters: Tensor) -> float:
    """Entropy (nats) of softmax(logits) for one [V] row; -inf entries count as dropped."""
    if not isinstance(logits_after_filters, Tensor) or logits_after_filters.dim() != 1:
        raise TinyLLMError("sampled_entropy takes one [V] row of logits")
    return float(_entropy_rows(logits_after_filters.float()))


def _check_row(logits: Tensor) -> None:
    """Model logits must be usable: NaN or an all -inf row would make every draw garbage."""
    if not isinstance(logits, Tensor) or not logits.is_floating_point() or logits.dim() != 1:
        raise TinyLLMError(
            f"logits must be a floating-point [V] tensor, got {getattr(logits, 'shape', type(logits).__name__)}"
        )
    top = float(logits.max())  # max propagates NaN, and is -inf only for an all -inf row
    if math.isnan(top) or top == float("-inf"):
        raise TinyLLMError("logits must contain no NaN and at least one finite value")


class InvalidDistribution(RuntimeError):
    """The processed logits of a row hold NaN or nothing finite: no token can be drawn from them."""


def _check_processed(processed: Tensor) -> None:
    # Never draw from a NaN row: inverse CDF over NaN picks the last token with logprob NaN.
    top = float(processed.max())  # NaN propagates; -inf only when every token was dropped
    if math.isnan(top) or top == float("-inf"):
        raise InvalidDistribution("the sampling distribution has no finite probabilities (NaN or all dropped)")


def _inverse_cdf(processed: Tensor, u: float) -> int:
    """First index whose float64 cumulative probability exceeds u * total."""
    probs = torch.softmax(processed, dim=-1)  # [V] float32
    cdf = torch.cumsum(probs.double(), dim=-1)  # [V] float64
    target = (cdf[-1] * u).reshape(1)  # [1]
    token = int(torch.searchsorted(cdf, target, right=True))
    if token >= probs.shape[-1]:  # u * total rounded up to total: take the last live token
        token = int(torch.nonzero(probs).max())
    return token


def _top_logprobs(logp: Tensor, n: int | None) -> list[tuple[int, float]]:
    """The n most likely (token, logprob) pairs, dropped tokens excluded; ties by index."""
    if not n:
        return []
    n = min(n, int((logp > float("-inf")).sum()))
    values, indices = torch.topk(logp, n)  # [n] each
    pairs = zip(indices.tolist(), values.tolist())
    return sorted(pairs, key=lambda pair: (-pair[1], pair[0]))


def _describe(processed: Tensor, token: int, n_logprobs: int | None) -> SampleResult:
    logp = torch.log_softmax(processed, dim=-1)  # [V]
    return SampleResult(
        token=token,
        logprob=float(logp[token]),
        top_logprobs=_top_logprobs(logp, n_logprobs),
        entropy=float(_entropy_rows(processed)),
    )


def sample(
    logits: Tensor,
    params: SamplingParams,
    *,
    prompt_ids: Sequence[int] | Tensor,
    generated_ids: Sequence[int] | Tensor,
    rng: RequestRng,
    position: int,
    constraint: Constraint | None = None,
    mu: float | None = None,
) -> SampleResult:
    """Pick generated token number `position` (0 = first) from one [V] row of logits; with a constraint,
    only from the tokens its grammar allows after generated_ids; with mirostat, `mu` is the request's at this
    position (None: its start, 2 * tau)."""
    _check_row(logits)
    if constraint is not None:
        logits = constraint.mask_logits(logits, generated_ids)  # [V]
    logits = _hold_back_stops(logits, params, position)  # [V]
    if params.uses_mirostat and mu is None:
        mu = start_mu(params.mirostat_tau)
    processed = process_logits(logits, params, prompt_ids, generated_ids, mu)  # [V] float32
    _check_processed(processed)
    if params.is_greedy:
        token = int(torch.argmax(processed))  # torch returns the first maximum: lowest index
    else:
        token = _inverse_cdf(processed, rng.uniform(position))
    result = _describe(processed, token, params.logprobs)
    if params.uses_mirostat:
        surprise = float(surprise_bits(processed.reshape(1, -1), torch.tensor([token], device=processed.device)))
        result.mu_after = next_mu(mu, surprise, params.mirostat_tau, params.mirostat_eta)
    return result


def _hold_back_stops(logits: Tensor, params: SamplingParams, position: int) -> Tensor:
    """logits [V] with the stop ids at -inf while token `position` comes before `min_tokens` (a new tensor);
    unchanged when nothing else is left to draw."""
    if position >= params.min_tokens or not params.stop_token_ids:
        return logits
    ids = [t for t in params.stop_token_ids if t < logits.shape[-1]]
    held = logits.clone()  # [V]
    held[ids] = float("-inf")
    return held if float(held.max()) > float("-inf") else logits


def _is_plain_greedy(params: SamplingParams, position: int) -> bool:
    """Greedy with nothing per-request to do at this position: one argmax over the batch serves it."""
    return (
        position >= params.min_tokens
        and params.is_greedy
        and params.logprobs is None
        and not params.logit_bias
        and params.structured is None
        and params.repetition_penalty == 1.0
        and params.presence_penalty == 0.0
        and params.frequency_penalty == 0.0
    )


def _plain_greedy_rows(logits: Tensor) -> list[SampleResult]:
    """sample() for rows [b, V] of plain-greedy requests: one native call where the kernels are built,
    else vectorised torch ops."""
    if logits.device.type == "cpu":
        try:
            native = greedy_rows(logits)
        except ValueError:
            native = None  # the torch path below raises the user-facing error
        if native is not None:
            return [SampleResult(token=t, logprob=lp, top_logprobs=[], entropy=h) for t, lp, h in zip(*native)]
    top = logits.amax(dim=-1)  # [b]; NaN propagates, -inf only for an all -inf row
    if bool(torch.isnan(top).any()) or bool((top == float("-inf")).any()):
        raise TinyLLMError("logits must contain no NaN and at least one finite value per row")
    rows = logits.float()  # [b, V]
    logp = torch.log_softmax(rows, dim=-1)  # [b, V]
    tokens = torch.argmax(rows, dim=-1, keepdim=True)  # [b, 1]; first maximum per row
    chosen = logp.gather(-1, tokens).squeeze(-1)  # [b]
    entropy = _entropy_rows(rows, logp)  # [b]
    return [
        SampleResult(token=t, logprob=lp, top_logprobs=[], entropy=h)
        for t, lp, h in zip(tokens.squeeze(-1).tolist(), chosen.tolist(), entropy.tolist())
    ]


def sample_batch(
    logits: Tensor,
    params: list[SamplingParams],
    prompt_ids: list[Sequence[int]],
    generated_ids: list[Sequence[int]],
    rngs: list[RequestRng],
    positions: list[int],
    constraints: list[Constraint | None] | None = None,
    mus: list[float | None] | None = None,
) -> list[SampleResult]:
    """sample() for each row of logits [B, V]; plain-greedy rows share one argmax. `constraints` holds each
    row's grammar matcher (None: unconstrained), `mus` each row's mirostat mu (None: none, or its start)."""
    if not isinstance(logits, Tensor) or logits.dim() != 2:
        shape = getattr(logits, "shape", type(logits).__name__)
        raise TinyLLMError(f"logits must be a [B, V] tensor, got {shape}")
    batch = logits.shape[0]
    constraints = [None] * batch if constraints is None else constraints
    mus = [None] * batch if mus is None else mus
    for name, seq in (
        ("params", params),
        ("prompt_ids", prompt_ids),
        ("generated_ids", generated_ids),
        ("rngs", rngs),
        ("positions", positions),
        ("constraints", constraints),
        ("mus", mus),
    ):
        if len(seq) != batch:
            raise TinyLLMError(f"{name} must have one entry per row ({batch}), got {len(seq)}")
    results: list[SampleResult | None] = [None] * batch
    fast = [i for i, p in enumerate(params) if _is_plain_greedy(p, positions[i])]
    if fast:
        rows = logits if len(fast) == batch else logits[fast]  # [b, V]
        for i, result in zip(fast, _plain_greedy_rows(rows)):
            results[i] = result
    for i in range(batch):
        if results[i] is None:
            results[i] = sample(
                logits[i],
                params[i],
                prompt_ids=prompt_ids[i],
                generated_ids=generated_ids[i],
                rng=rngs[i],
                position=positions[i],
                constraint=constraints[i],
                mu=mus[i],
            )
    return results  # type: ignore[return-value]
