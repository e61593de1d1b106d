"""After sampling: apply a request's new tokens (EOS / stop ids, text, stop strings, budget) and decide
whether it has finished. Tensor-free, so the engine's step stays a short list of stages."""
from __future__ import annotations

from dataclasses import dataclass

from ..generation import TokenLogprob
from ..sampling.sampler import SampleResult
from .request import Request, RequestStatus


@dataclass
class Applied:
    text: str = ""
    num_new: int = 0
    finish: RequestStatus | None = None  # set when the request is done


def apply_tokens(req: Request, results: list[SampleResult], eos_ids: tuple[int, ...], now: float) -> Applied:
    """Append sampled tokens in order until one ends the request."""
    out = Applied()
    req.times.first_token = req.times.first_token or now
    stop_ids = set(req.params.stop_token_ids) | (set() if req.params.ignore_eos else set(eos_ids))
    for r in results:
        if r.token in stop_ids:
            out.finish = RequestStatus.FINISHED_STOPPED
            break
        out.text += req.out.add(r.token, TokenLogprob(r.token, r.logprob, list(r.top_logprobs), r.entropy))
        out.num_new += 1
        req.times.token_times.append(now)
        if req.out.stopped:
            out.finish = RequestStatus.FINISHED_STOPPED
            break
        if len(req.output_ids) >= req.max_new:
            out.finish = RequestStatus.FINISHED_LENGTH
            break
    if out.finish is not None:
        out.text += req.out.finish()  # the decoder's tail and any held-back text
        if req.out.stopped:
            out.finish = RequestStatus.FINISHED_STOPPED
    return out
