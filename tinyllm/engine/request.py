"""A request's state inside the engine: its ids, sampling, streaming text and timings."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from ..output_stream import OutputStream
from ..sampling.params import SamplingParams
from ..sampling.rng import RequestRng, request_rng


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


FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_ERROR: "error",
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
    num_computed < num_tokens while running). `max_new` is the token budget after the context limit."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    max_new: int
    out: OutputStream
    rng: RequestRng
    status: RequestStatus = RequestStatus.WAITING
    num_computed: int = 0
    num_cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache (first admission)
    num_preemptions: int = 0
    draft_ids: list[int] = field(default_factory=list)
    proposer: object = None
    spec_stats: dict = field(default_factory=lambda: {"drafted": 0, "accepted": 0, "target_forwards": 0})
    times: RequestTimes = field(default_factory=RequestTimes)

    @classmethod
    def create(cls, request_id: str, prompt_ids: list[int], params: SamplingParams, max_new: int, tok) -> "Request":
        return cls(request_id, prompt_ids, params, max_new, OutputStream.create(tok, params.stop),
                   request_rng(params.seed))

    @property
    def output_ids(self) -> list[int]:
        return self.out.ids

    @property
    def num_tokens(self) -> int:
        """Positions the next forward may reach: prompt, output and drafts."""
        return len(self.prompt_ids) + len(self.output_ids) + len(self.draft_ids)

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
        return FINISH_REASONS.get(self.status)
