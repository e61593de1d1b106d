"""A request's state (its ids, sampling, streaming text and timings), how sampled tokens are accepted
into it, and the Generation it becomes. Shared by the engine and the reference loop; tensor-free."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from ..grammar.constraint import Constraint
from ..outputs import STATS_KEYS, FinishReason, Generation, Timings, TokenLogprob
from ..sampling.mirostat import MuTrail
from ..sampling.params import SamplingParams
from ..sampling.rng import RequestRng, request_rng
from ..sampling.sampler import SampleResult
from ..text.output_stream import OutputStream
from ..text.reasoning import ReasoningSplitter, opens_in_prompt
from ..text.stop import StopMatcher


class RequestStatus(enum.IntEnum):
    """Ordered: every status from FINISHED_STOPPED on is finished."""

    WAITING = 0
    RUNNING = 1
    FINISHED_STOPPED = 10
    FINISHED_LENGTH = 11
    FINISHED_ABORTED = 12
    FINISHED_ERROR = 13  # its own processing failed (see isolation.py); the others went on

    @property
    def is_finished(self) -> bool:
        return self >= RequestStatus.FINISHED_STOPPED

    @property
    def finish_reason(self) -> FinishReason | None:
        return _FINISH_REASONS.get(self)


_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: FinishReason.STOP,
    RequestStatus.FINISHED_LENGTH: FinishReason.LENGTH,
    RequestStatus.FINISHED_ABORTED: FinishReason.ABORT,
    RequestStatus.FINISHED_ERROR: FinishReason.ERROR,
}


@dataclass
class RequestTimes:
    arrival: float = field(default_factory=time.perf_counter)
    first_scheduled: float | None = None
    first_token: float | None = None
    finished: float | None = None
    token_times: list[float] = field(default_factory=list)


@dataclass
class Request:
    """Terms: `num_computed` positions have KV in the cache; the sequence is prompt_ids + output_ids, then
    any draft_ids awaiting verification; the last output id is fed to the model on the next step (so
    num_computed < num_tokens while running). `max_tokens` is the most output tokens the request may have:
    params.max_tokens cut to the context and the KV pool (engine/prompt.py's effective_max_tokens).
    `num_sampling_forwards` counts the forwards whose logits were sampled (the prefill's last chunk, then
    one per decode or verification)."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    max_tokens: int
    out: OutputStream
    rng: RequestRng
    stop_ids: frozenset[int] = frozenset()
    status: RequestStatus = RequestStatus.WAITING
    num_computed: int = 0
    num_cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache (first admission)
    num_preemptions: int = 0
    draft_ids: list[int] = field(default_factory=list)
    proposer: object = None
    pacing: object = None  # speculative/pacing.py: whether it drafts at a decode step
    num_draft_tokens: int = 0  # k: drafts proposed per verification
    num_drafted: int = 0
    num_accepted: int = 0
    num_sampling_forwards: int = 0
    prompt_logprobs: list = field(default_factory=list)  # [None, TokenLogprob, ...] (prompt_logprobs.py)
    constraint: Constraint | None = None  # the grammar matcher of a structured request (grammar/constraint.py)
    mirostat: MuTrail | None = None  # mirostat's mu per output position (sampling/mirostat.py); None without it
    times: RequestTimes = field(default_factory=RequestTimes)

    @classmethod
    def create(
        cls,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        max_tokens: int,
        tok,
        eos_ids=(),
        constraint: Constraint | None = None,
    ) -> Request:
        """The EOS ids end the request unless params.ignore_eos; params.stop_token_ids always do. With
        params.min_tokens (vLLM's), neither ends it before that many output tokens: the request's params then
        carry every stop id in stop_token_ids, which the sampler holds back until then (as vLLM's
        all_stop_token_ids), and the stop strings are searched only from the min_tokens-th token's text on."""
        stop_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else frozenset(eos_ids))
        if params.min_tokens and stop_ids != set(params.stop_token_ids):
            params = params.replace(stop_token_ids=tuple(sorted(stop_ids)))
        req = cls(
            request_id,
            prompt_ids,
            params,
            max_tokens,
            OutputStream.create(tok, () if params.min_tokens else params.stop, _splitter(params, prompt_ids, tok)),
            request_rng(params.seed),
            stop_ids,
            constraint=constraint,
            mirostat=MuTrail.start(params.mirostat_tau) if params.uses_mirostat else None,
        )
        if params.prompt_logprobs is not None:
            req.prompt_logprobs.append(None)  # the first token has nothing before it
        return req

    @property
    def output_ids(self) -> list[int]:
        return self.out.ids

    def mirostat_mu(self) -> float | None:
        """Mirostat's mu for the next output token; None without mirostat."""
        return None if self.mirostat is None else self.mirostat.at(len(self.output_ids))

    @property
    def num_tokens(self) -> int:
        """Positions the next forward may reach: prompt, output and drafts."""
        return len(self.prompt_ids) + len(self.output_ids) + len(self.draft_ids)

    @property
    def tokens_left(self) -> int:
        """Output tokens the request may still generate before max_tokens ends it."""
        return self.max_tokens - len(self.output_ids)

    @property
    def num_committed(self) -> int:
        """Prompt and output tokens (drafts excluded)."""
        return len(self.prompt_ids) + len(self.output_ids)

    def tokens(self, start: int, stop: int) -> list[int]:
        n = len(self.prompt_ids)
        if stop <= n:
            return self.prompt_ids[start:stop]
        return (self.prompt_ids + self.output_ids + self.draft_ids)[start:stop]

    @property
    def finish_reason(self) -> str | None:
        reason = self.status.finish_reason
        return None if reason is None else reason.value


# The prompt's last tokens, decoded, show whether the template left a think span open for the reply.
_PROMPT_TAIL_TOKENS = 8


def _splitter(params: SamplingParams, prompt_ids: list[int], tok) -> ReasoningSplitter | None:
    """The reasoning splitter of a request that asks for one, from a model that reasons."""
    fmt = tok.reasoning if params.reasoning else None
    if fmt is None:
        return None
    return ReasoningSplitter(fmt, opens_in_prompt(fmt, tok.decode(prompt_ids[-_PROMPT_TAIL_TOKENS:])))


@dataclass
class AcceptedTokens:
    text: str = ""
    reasoning: str = ""  # the think span's text that became final (a request with params.reasoning)
    num_new: int = 0
    finish: RequestStatus | None = None  # set when the request is done


def accept_tokens(req: Request, results: list[SampleResult], now: float) -> AcceptedTokens:
    """Append sampled tokens in order until one ends the request: a stop id (never emitted), a stop string
    (text cut before it; with min_tokens, found only from the min_tokens-th token's text on), or max_tokens.
    On the end, the decoder's tail and held-back text are flushed."""
    out = AcceptedTokens()
    req.times.first_token = req.times.first_token or now
    for r in results:
        if r.token in req.stop_ids:
            out.finish = RequestStatus.FINISHED_STOPPED
            break
        if len(req.output_ids) + 1 == req.params.min_tokens and req.params.stop:
            req.out.matcher = StopMatcher(req.params.stop)  # stop strings count from token number min_tokens on
        out.text += req.out.add(r.token, TokenLogprob(r.token, r.logprob, list(r.top_logprobs), r.entropy))
        if req.mirostat is not None:
            req.mirostat.record(len(req.output_ids) - 1, r.mu_after)
        out.num_new += 1
        req.times.token_times.append(now)
        if req.out.stopped:
            out.finish = RequestStatus.FINISHED_STOPPED
            break
        if req.tokens_left <= 0:
            out.finish = RequestStatus.FINISHED_LENGTH
            break
    if out.finish is not None:
        out.text += req.out.finish()  # the decoder's tail and any held-back text
        if req.out.stopped:
            out.finish = RequestStatus.FINISHED_STOPPED
    out.reasoning = req.out.take_reasoning()
    return out


def make_generation(req: Request) -> Generation:
    """A request (finished or running) as a Generation: the one place results and stats are built."""
    t = req.times
    end = t.finished or time.perf_counter()
    first = t.first_token or end
    timings = Timings(
        prefill_s=first - (t.first_scheduled or t.arrival),
        decode_s=end - first,
        ttft_s=first - t.arrival,
        total_s=end - t.arrival,
    )
    n = len(req.output_ids)
    stats = {
        "prompt_tokens": len(req.prompt_ids),
        "completion_tokens": n,
        "cached_tokens": req.num_cached_tokens,
        "preemptions": req.num_preemptions,
        "prefill_tokens_per_s": len(req.prompt_ids) / timings.prefill_s if timings.prefill_s > 0 else 0.0,
        "decode_tokens_per_s": (n - 1) / timings.decode_s if n > 1 and timings.decode_s > 0 else 0.0,
        "drafted": req.num_drafted,
        "accepted": req.num_accepted,
        "acceptance_rate": req.num_accepted / req.num_drafted if req.num_drafted else 0.0,
        "tokens_per_target_forward": n / max(1, req.num_sampling_forwards),
        "token_times": list(t.token_times),
        "arrival": t.arrival,
    }
    assert tuple(stats) == STATS_KEYS
    reason = req.finish_reason or FinishReason.LENGTH.value
    return Generation(
        req.out.text,
        list(req.output_ids),
        list(req.out.logprobs),
        timings,
        stats,
        reason,
        list(req.prompt_ids),
        list(req.prompt_logprobs) if req.prompt_logprobs else None,
        req.out.reasoning,
    )
