"""Engine: continuous batching. Each step() runs one forward over every running request's next token plus
prefill chunks of waiting ones, samples, streams text, and retires finished requests at once."""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import torch

from ..cache.block_pool import BlockPool
from ..cache.paged_cache import PagedStorage
from ..errors import TinyLLMError
from ..generate import check_prompt, prompt_ids_of
from ..generation import Generation, Timings, TokenLogprob
from ..llm import parse_dtype
from ..sampling.params import SamplingParams
from ..sampling.sampler import sample_batch
from ..speculative.proposer import SpeculativeConfig
from ..speculative.verify import verify_drafts
from .isolation import describe, draw_rows, isolated
from .postprocess import apply_tokens
from .kv_manager import KVManager, blocks_for
from .request import Request, RequestStatus
from .runner import ModelRunner
from .scheduler import Scheduler


@dataclass
class RequestOutput:
    request_id: str
    text: str                        # new final text since the last output
    token_ids: list[int]             # new ids since the last output
    logprobs: list[TokenLogprob]
    finished: bool = False
    finish_reason: str | None = None
    num_cached_tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None         # finish_reason "error": what failed


@dataclass
class EngineConfig:
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 256
    block_size: int = 16
    num_blocks: int | None = None          # default: from kv_memory_bytes
    kv_memory_bytes: int = 1 << 30
    kv_dtype: str | None = None            # default: the model's dtype
    enable_prefix_caching: bool = True
    speculative: SpeculativeConfig | None = None

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "kv_memory_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TinyLLMError(f"{name} must be a positive integer, got {value!r}")
        if self.num_blocks is not None and (not isinstance(self.num_blocks, int) or self.num_blocks < 1):
            raise TinyLLMError(f"num_blocks must be a positive integer, got {self.num_blocks!r}")


class Engine:
    def __init__(self, llm, config: EngineConfig | None = None, **options):
        self.config = config or EngineConfig(**options)
        self.llm, self.model, self.tokenizer = llm, llm.model, llm.tokenizer
        c, cfg = llm.config, self.config
        dtype = llm.model.dtype if cfg.kv_dtype is None else parse_dtype(cfg.kv_dtype, "kv_dtype")
        itemsize = torch.empty(0, dtype=dtype).element_size()
        block_bytes = 2 * c.num_layers * c.num_kv_heads * c.head_dim * cfg.block_size * itemsize
        num_blocks = cfg.num_blocks or max(1, cfg.kv_memory_bytes // block_bytes)
        self.storage = PagedStorage(c.num_layers, c.num_kv_heads, c.head_dim, num_blocks, cfg.block_size, dtype,
                                    llm.model.device)
        self.pool = BlockPool(num_blocks, cfg.block_size)
        self.kv = KVManager(self.pool, cfg.enable_prefix_caching)
        self.scheduler = Scheduler(self.kv, cfg.max_num_seqs, cfg.max_num_batched_tokens)
        self.runner = ModelRunner(self.model, self.storage)
        self.requests: dict[str, Request] = {}
        self._ids = itertools.count()
        self._early: list[RequestOutput] = []  # outputs produced outside step() (aborts)

    # ---- requests in
    def add_request(self, prompt, params: SamplingParams | None = None, request_id: str | None = None) -> str:
        """Queue a request; raise TinyLLMError (and queue nothing) if it can never run."""
        req = self._make_request(prompt, params, request_id)
        self.requests[req.request_id] = req
        self.scheduler.add(req)
        return req.request_id

    def _make_request(self, prompt, params: SamplingParams | None, request_id: str | None) -> Request:
        """Validate a request without changing any state."""
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise TinyLLMError(f"params must be a SamplingParams, got {type(params).__name__}")
        ids = prompt_ids_of(self.tokenizer, prompt)
        max_len = self.llm.config.context_length
        check_prompt(ids, self.llm.config.vocab_size, max_len)
        if blocks_for(len(ids) + 1, self.pool.block_size) > self.pool.num_blocks:
            raise TinyLLMError(f"prompt has {len(ids)} tokens, more than the KV pool holds "
                               f"({self.pool.num_blocks} blocks of {self.pool.block_size})")
        request_id = str(next(self._ids)) if request_id is None else str(request_id)
        if request_id in self.requests:
            raise TinyLLMError(f"request id {request_id!r} is already in use")
        # Room for every token even alone in the pool (the last one is never fed back): a request that
        # outgrows the whole pool ends with "length" instead of being preempted forever.
        pool_positions = self.pool.num_blocks * self.pool.block_size
        max_new = min(max_len - len(ids), pool_positions - len(ids) + 1)
        if params.max_tokens is not None:
            max_new = min(max_new, params.max_tokens)
        req = Request.create(request_id, ids, params, max_new, self.tokenizer)
        if self.config.speculative is not None:
            from ..speculative.factory import make_proposer

            req.proposer = make_proposer(self.config.speculative, self.llm, max_len=len(ids) + max_new)
        return req

    def abort(self, request_id: str) -> bool:
        """Stop a request and free its blocks. Returns False (and does nothing) for an unknown or
        already finished id."""
        req = self.requests.get(str(request_id))
        if req is None or req.status.is_finished:
            return False
        self.scheduler.finish(req, RequestStatus.FINISHED_ABORTED)
        req.times.finished = time.perf_counter()
        self._early.append(self._output(req, "", 0))
        return True

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ---- one step
    def step(self) -> list[RequestOutput]:
        """One forward over the scheduled batch; returns each touched request's new text and ids."""
        outputs, self._early = self._early, []
        self._propose_drafts()
        plan = self.scheduler.schedule()
        if not plan.chunks:
            return outputs
        now = time.perf_counter()
        for chunk in plan.chunks:
            chunk.request.times.first_scheduled = chunk.request.times.first_scheduled or now
        sampling, logits = self.runner.run(plan, self.kv.tables)
        for chunk in plan.chunks:
            chunk.request.num_computed += chunk.num_tokens
        if sampling:
            outputs += self._sample(sampling, logits)
        for chunk in plan.chunks:
            if not chunk.request.status.is_finished:
                self.kv.commit(chunk.request)
        return outputs

    def _propose_drafts(self) -> None:
        """Speculation: each running request ready to decode gets up to k drafts to verify this step."""
        k = self.config.speculative.num_draft_tokens if self.config.speculative else 0
        for req in self.scheduler.running:
            if req.proposer is None or req.draft_ids or req.num_computed != req.num_committed - 1:
                continue
            room = min(k, req.max_new - len(req.output_ids) - 1)
            if room > 0:
                req.draft_ids = req.proposer.propose(req.prompt_ids + req.output_ids, room)

    def _sample(self, chunks, logits) -> list[RequestOutput]:
        """Sample every chunk's rows: one batched draw for plain rows, verification for drafted ones."""
        now, row, plain, drafted = time.perf_counter(), 0, [], []
        for c in chunks:
            n = 1 + len(c.request.draft_ids)
            (drafted if c.request.draft_ids else plain).append((c.request, row, n))
            row += n
        results, failures = {}, {}
        if plain:
            reqs = [r for r, _, _ in plain]
            rows = logits[[i for _, i, _ in plain]] if len(plain) < logits.shape[0] else logits
            results, failures = draw_rows(rows, reqs)
        for req, i, n in drafted:
            results[req.request_id], failures[req.request_id] = isolated(req, lambda: verify_drafts(
                logits[i:i + n], req.draft_ids, req.params, req.prompt_ids, req.output_ids, req.rng))
        return [self._apply_or_fail(c.request, results.get(c.request.request_id),
                                    failures.get(c.request.request_id), now) for c in chunks]

    def _apply_or_fail(self, req: Request, results: list | None, error: Exception | None, now: float):
        output, error = (None, error) if error is not None else isolated(req, lambda: self._apply(req, results, now))
        if error is None:
            return output
        self.scheduler.finish(req, RequestStatus.FINISHED_ERROR)  # its blocks back; the step goes on
        req.times.finished = now
        output = self._output(req, "", 0)
        output.error = describe(error)
        return output

    def _apply(self, req: Request, results: list, now: float) -> RequestOutput:
        drafts = req.draft_ids
        req.draft_ids = []
        if req.proposer is not None:
            req.spec_stats["drafted"] += len(drafts)
            req.spec_stats["accepted"] += len(results) - 1
            req.spec_stats["target_forwards"] += 1
        applied = apply_tokens(req, results, self.llm.eos_ids, now)
        if applied.finish is not None:
            self.scheduler.finish(req, applied.finish)
            req.times.finished = now
        elif drafts:  # keep the KV of the fed token and the accepted drafts; drop the rejected ones
            req.num_computed = req.num_committed - 1
            self.kv.truncate(req, req.num_computed)
            req.proposer.rollback(req.num_computed)
        return self._output(req, applied.text, applied.num_new)

    def _output(self, req: Request, text: str, n_new: int) -> RequestOutput:
        new = req.output_ids[len(req.output_ids) - n_new:] if n_new else []
        return RequestOutput(req.request_id, text, new, req.out.logprobs[len(req.output_ids) - n_new:] if n_new else [],
                             req.status.is_finished, req.finish_reason, req.num_cached_tokens,
                             len(req.prompt_ids), len(req.output_ids))

    # ---- conveniences
    def pool_stats(self):
        return self.pool.stats()

    def num_running(self) -> int:
        return len(self.scheduler.running)

    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    def generation(self, request_id: str) -> Generation:
        """A finished (or running) request as a Generation."""
        req = self.requests[str(request_id)]
        t = req.times
        end = t.finished or time.perf_counter()
        first = t.first_token or end
        timings = Timings(prefill_s=first - (t.first_scheduled or t.arrival), decode_s=end - first,
                          ttft_s=first - t.arrival, total_s=end - t.arrival)
        n = len(req.output_ids)
        stats = {"prompt_tokens": len(req.prompt_ids), "completion_tokens": n,
                 "cached_tokens": req.num_cached_tokens, "preemptions": req.num_preemptions,
                 "decode_tokens_per_s": (n - 1) / timings.decode_s if n > 1 and timings.decode_s else 0.0,
                 "token_times": list(t.token_times), "arrival": t.arrival}
        if req.proposer is not None:
            s = req.spec_stats
            stats.update(drafted=s["drafted"], accepted=s["accepted"],
                         acceptance_rate=s["accepted"] / s["drafted"] if s["drafted"] else 0.0,
                         tokens_per_target_forward=n / max(1, s["target_forwards"]))  # every sampling forward
        return Generation(req.out.text, list(req.output_ids), list(req.out.logprobs), timings, stats,
                          req.finish_reason or "length", list(req.prompt_ids))

    def release(self, request_id: str) -> None:
        """Forget a finished request's record (its blocks were freed when it finished)."""
        req = self.requests.get(str(request_id))
        if req is not None and req.status.is_finished:
            del self.requests[str(request_id)]

    def generate(self, prompts: list, params: SamplingParams | list[SamplingParams]) -> list[Generation]:
        """Run prompts to completion together; results in the order given."""
        plist = params if isinstance(params, list) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise TinyLLMError(f"got {len(plist)} sampling params for {len(prompts)} prompts")
        reqs = [self._make_request(p, sp, None) for p, sp in zip(prompts, plist)]  # all valid, or none queued
        for req in reqs:
            self.requests[req.request_id] = req
            self.scheduler.add(req)
        ids = [r.request_id for r in reqs]
        while self.has_unfinished():
            self.step()
        results = [self.generation(i) for i in ids]
        for i in ids:
            self.release(i)
        return results
