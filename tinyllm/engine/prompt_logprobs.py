"""Prompt logprobs: the log-probability the model gives each prompt token after the tokens before it.

Terms: the logits at position i predict token i + 1, so a prompt of n tokens has n - 1 scored tokens and the
first has none (None, as OpenAI's echo reported it). `Request.prompt_logprobs` holds [None, lp(1), ...] as far
as computed; its length - 1 is the next position whose logits are needed. Values are the log-softmax of the
model's own logits (no sampling settings apply), so they score the text itself. Such requests bypass the
prefix cache (kv_manager.py) so every prompt position is computed; a recompute after preemption skips the
positions already recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..outputs import TokenLogprob
from .request import Request


@dataclass
class PromptRows:
    """Logits rows [k, V] of one request's prompt positions first .. first + k - 1."""

    request: Request
    first: int
    logits: torch.Tensor


def wants_prompt_logprobs(req: Request) -> bool:
    return req.params.prompt_logprobs is not None


def missing_positions(req: Request, start: int, stop: int) -> range:
    """The positions in [start, stop) whose logits would add prompt logprobs not recorded yet."""
    if not wants_prompt_logprobs(req):
        return range(0)
    return range(max(start, len(req.prompt_logprobs) - 1), min(stop, len(req.prompt_ids) - 1))


def record(rows: PromptRows) -> None:
    """Append the logprobs of the prompt tokens these rows predict (rows must continue the record)."""
    req, top_n = rows.request, rows.request.params.prompt_logprobs
    assert rows.first == len(req.prompt_logprobs) - 1, "prompt logprob rows must continue the record"
    logp = torch.log_softmax(rows.logits.float(), dim=-1)  # [k, V]
    k = logp.shape[0]
    targets = torch.tensor(req.prompt_ids[rows.first + 1 : rows.first + 1 + k], device=logp.device)  # [k]
    chosen = logp.gather(-1, targets[:, None])[:, 0].tolist()  # [k]
    top_values, top_ids = torch.topk(logp, top_n, dim=-1) if top_n else (None, None)  # [k, n] each
    for j, (token, value) in enumerate(zip(targets.tolist(), chosen)):
        top = list(zip(top_ids[j].tolist(), top_values[j].tolist())) if top_n else []
        req.prompt_logprobs.append(TokenLogprob(token, value, top))
