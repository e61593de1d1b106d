"""The result of one generation: text, ids, per-token logprobs, timings and stats."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class FinishReason(str, Enum):
    STOP = "stop"      # EOS / end-of-turn id, a stop token id, or a stop string
    LENGTH = "length"  # max_tokens reached, or the model's context is full
    ABORT = "abort"    # cancelled by the caller


@dataclass
class TokenLogprob:
    token: int
    logprob: float                                   # under the distribution the token was drawn from
    top: list[tuple[int, float]] = field(default_factory=list)  # top-n alternatives, descending
    entropy: float = 0.0                             # of that distribution, in nats


@dataclass
class Timings:
    prefill_s: float = 0.0
    decode_s: float = 0.0
    ttft_s: float = 0.0    # from the call to the first generated token
    total_s: float = 0.0


@dataclass
class Generation:
    text: str
    ids: list[int]
    logprobs: list[TokenLogprob]
    timings: Timings
    stats: dict
    finish_reason: str = FinishReason.LENGTH.value
    prompt_ids: list[int] = field(default_factory=list)

    @property
    def usage(self) -> dict:
        return {"prompt_tokens": len(self.prompt_ids), "completion_tokens": len(self.ids),
                "total_tokens": len(self.prompt_ids) + len(self.ids)}
