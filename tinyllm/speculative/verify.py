"""Verification: which drafts the target accepts, and the token it adds.

Drafts from our proposers are deterministic (the draft distribution q is one-hot at the draft d). Rejection
sampling then accepts d with probability min(1, p(d)/q(d)) = p(d) and otherwise draws from the normalised
residual max(p - q, 0), which is p with d removed. We couple both draws through the request's one uniform
for that position: x = inverse-CDF(p, u(seed, t)); accept iff x == d, else emit x. The acceptance
probability is p(d) and a rejected x follows the residual, so this *is* rejection sampling; and because x is
exactly the token plain decoding draws at position t, seeded output is identical with and without drafts.
Greedy is the special case x = argmax p. With mirostat, row i samples with the mu that follows the draws of
rows before it, which are the tokens plain decoding would have drawn, so mu too is plain decoding's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..grammar.constraint import Constraint
from ..sampling.params import SamplingParams
from ..sampling.rng import RequestRng
from ..sampling.sampler import SampleResult, sample


def verify_drafts(
    logits: torch.Tensor,
    drafts: Sequence[int],
    params: SamplingParams,
    prompt_ids: Sequence[int],
    generated_ids: Sequence[int],
    rng: RequestRng,
    constraint: Constraint | None = None,
    mu: float | None = None,
) -> list[SampleResult]:
    """logits [m+1, V]: row i predicts the token after generated_ids + drafts[:i]. Returns the tokens to
    emit: the accepted drafts, then the target's own token (a correction, or a bonus when all pass). A
    constraint masks row i with its state after generated_ids + drafts[:i]; the next call rolls it back past
    any rejected draft. `mu` is mirostat's at the first row (None without mirostat)."""
    history = list(generated_ids)
    out = []
    for i in range(len(drafts) + 1):
        r = sample(
            logits[i],
            params,
            prompt_ids=prompt_ids,
            generated_ids=history,
            rng=rng,
            position=len(history),
            constraint=constraint,
            mu=mu,
        )
        out.append(r)
        mu = r.mu_after
        if i == len(drafts) or r.token != drafts[i]:
            break
        history.append(r.token)
    return out
