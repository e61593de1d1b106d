"""What generation hands back: a finished request's Generation, and a step's RequestOutput."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class FinishReason(str, Enum):
    """Why a request ended; the one table of finish reasons (the engine's statuses map onto it)."""

    STOP = "stop"  # EOS / end-of-turn id, a stop token id, or a stop string
    LENGTH = "length"  # max_tokens reached, or the model's context (or the KV pool) is full
    ABORT = "abort"  # cancelled by the caller
    ERROR = "error"  # its own processing failed (the other requests went on)


@dataclass
class TokenLogprob:
    token: int
    logprob: float  # under the distribution the token was drawn from
    top: list[tuple[int, float]] = field(default_factory=list)  # top-n alternatives, descending
    entropy: float = 0.0  # of that distribution, in nats


@dataclass
class Timings:
    prefill_s: float = 0.0  # from first being scheduled to the first generated token
    decode_s: float = 0.0  # from the first generated token to the end
    ttft_s: float = 0.0  # from the call (arrival) to the first generated token
    total_s: float = 0.0


# Generation.stats always has exactly these keys, whichever path, options or number of prompts.
STATS_KEYS = (
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "preemptions",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "drafted",
    "accepted",
    "acceptance_rate",
    "tokens_per_target_forward",
    "token_times",
    "arrival",
)


@dataclass
class Generation:
    text: str
    ids: list[int]
    logprobs: list[TokenLogprob]
    timings: Timings
    stats: dict  # keys: STATS_KEYS
    finish_reason: str = FinishReason.LENGTH.value
    prompt_ids: list[int] = field(default_factory=list)
    prompt_logprobs: list | None = None  # [None, TokenLogprob, ...] per prompt token, when asked
    reasoning: str | None = None  # params.reasoning, a model that reasons: the think span's text (`text`: the answer)

    @property
    def usage(self) -> dict:
        return {
            "prompt_tokens": len(self.prompt_ids),
            "completion_tokens": len(self.ids),
            "total_tokens": len(self.prompt_ids) + len(self.ids),
        }


@dataclass
class RequestOutput:
    """What one engine step did for one request: the text and ids that became final since the last one."""

    request_id: str
    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob]
    finished: bool = False
    finish_reason: str | None = None
    num_cached_tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None  # finish_reason "error": what failed
    prompt_logprobs: list | None = None  # on a request's first output, when asked: [None, TokenLogprob, ...]
    error_kind: str | None = None  # "grammar": the request's own grammar failed (its fault, not the engine's)
    reasoning: str = ""  # params.reasoning: the think span's text that became final (`text` is then the answer's)
    reasoning_tokens: int = 0  # of completion_tokens, those inside the think span so far


@dataclass
class Score:
    """How likely a continuation is after a prompt: the sum of its tokens' logprobs, and whether each of
    them was the model's most likely token (lm-eval's loglikelihood pair)."""

    logprob: float
    is_greedy: bool
    num_tokens: int
