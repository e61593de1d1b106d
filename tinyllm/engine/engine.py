"""Engine: continuous batching. Each step() runs one forward over every running request's next token plus
prefill chunks of waiting ones, samples, streams text, and retires finished requests at once."""

from __future__ import annotations

import itertools
import time
from concurrent.futures import FIRST_COMPLETED
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass

from ..cache.block_pool import BlockPool
from ..cache.block_table import blocks_for
from ..cache.paged_cache import PagedStorage
from ..cache.q8_kv import bytes_per_value
from ..config import parse_kv_dtype
from ..errors import TinyLLMError
from ..outputs import Generation, RequestOutput
from ..sampling.logit_bias import check_logit_bias_ids
from ..sampling.params import SamplingParams
from ..speculative.factory import DraftModels, make_proposer
from ..speculative.pacing import DraftPacing
from ..speculative.proposer import SpeculativeConfig
from ..speculative.verify import verify_drafts
from .isolation import describe, draw_rows, isolated
from .kv_manager import KVManager
from .model_parts import ModelParts
from .prompt import check_prompt, effective_max_tokens, prompt_ids_of
from .prompt_logprobs import record as record_prompt_logprobs
from .request import Request, RequestStatus, accept_tokens, make_generation
from .runner import ModelRunner
from .scheduler import Scheduler


@dataclass
class EngineConfig:
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 256
    block_size: int = 16
    num_blocks: int | None = None  # default: from kv_memory_bytes
    kv_memory_bytes: int = 1 << 30
    kv_dtype: str | None = None  # default: the model's dtype
    enable_prefix_caching: bool = True
    speculative: SpeculativeConfig | None = None
    # False: a grammar not compiled yet compiles on a grammar thread while its request waits (and fails
    # alone if it cannot), so add_request never compiles on the thread that steps the engine (the server)
    compile_grammars_on_add: bool = True
    # True: every page of the KV pool is written when the engine is built (a server's start-up), so a
    # sequence's first write into fresh pages never stalls the step; False: pages map as they fill
    resident_kv: bool = False

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "kv_memory_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TinyLLMError(f"{name} must be a positive integer, got {value!r}")
        if self.num_blocks is not None and (not isinstance(self.num_blocks, int) or self.num_blocks < 1):
            raise TinyLLMError(f"num_blocks must be a positive integer, got {self.num_blocks!r}")
        if not isinstance(self.resident_kv, bool):
            raise TinyLLMError(f"resident_kv must be True or False, got {self.resident_kv!r}")


class Engine:
    """Many requests over one model: add_request, then step() until has_unfinished() is False.
    Built from a ModelParts (an LLM's `.parts`): the model, its tokenizer and config, eos ids, grammars and
    the tensor-parallel group, if any."""

    def __init__(self, parts: ModelParts, config: EngineConfig | None = None, **options):
        if not isinstance(parts, ModelParts):
            raise TinyLLMError(f"Engine takes a ModelParts (an LLM's .parts), got {type(parts).__name__}")
        self.config = config or EngineConfig(**options)
        self.model, self.tokenizer, self.model_config = parts.model, parts.tokenizer, parts.config
        self.eos_ids = parts.eos_ids
        c, cfg = parts.config, self.config
        dtype = parts.model.dtype if cfg.kv_dtype is None else parse_kv_dtype(cfg.kv_dtype)
        tp = parts.tensor_parallel  # this rank holds a share of the KV heads
        num_kv_heads = c.num_kv_heads if tp is None else tp.num_local_kv_heads
        block_bytes = int(2 * c.num_layers * num_kv_heads * c.head_dim * cfg.block_size * bytes_per_value(dtype))
        num_blocks = cfg.num_blocks or max(1, cfg.kv_memory_bytes // block_bytes)
        start = time.perf_counter()
        self.storage = PagedStorage(
            c.num_layers,
            num_kv_heads,
            c.head_dim,
            num_blocks,
            cfg.block_size,
            dtype,
            parts.model.device,
            cfg.resident_kv,
        )
        self.kv_setup_s = time.perf_counter() - start  # making the pool (writing it, when resident_kv)
        self.pool = BlockPool(num_blocks, cfg.block_size)
        self.kv = KVManager(self.pool, cfg.enable_prefix_caching)
        self.scheduler = Scheduler(self.kv, cfg.max_num_seqs, cfg.max_num_batched_tokens)
        self.runner = ModelRunner(self.model, self.storage) if tp is None else tp.runner(self.model, self.storage)
        self.drafts = DraftModels(self.model, self.tokenizer) if tp is None else tp.drafts(self.tokenizer)
        self.tensor_parallel = tp
        self.grammars = parts.grammars  # shared with the LLM (and the server's request preparation)
        self.requests: dict[str, Request] = {}
        self._ids = itertools.count()
        self._early: list[RequestOutput] = []  # outputs produced outside step() (aborts)

    # ---- requests in
    def add_request(
        self,
        prompt,
        params: SamplingParams | None = None,
        request_id: str | None = None,
        speculative: SpeculativeConfig | None = None,
    ) -> str:
        """Queue a request; raise TinyLLMError (and queue nothing) if it can never run. `speculative`
        overrides the engine's speculative config for this request."""
        req = self._make_request(prompt, params, request_id, speculative)
        self._queue(req)
        return req.request_id

    def _queue(self, req: Request) -> None:
        self.requests[req.request_id] = req
        self.scheduler.add(req)
        if req.constraint is not None:  # its first masks, while it waits and prefills
            req.constraint.prefetch([req.output_ids])

    def _make_request(
        self,
        prompt,
        params: SamplingParams | None,
        request_id: str | None,
        speculative: SpeculativeConfig | None = None,
    ) -> Request:
        """Validate a request without changing any state."""
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise TinyLLMError(f"params must be a SamplingParams, got {type(params).__name__}")
        ids = prompt_ids_of(self.tokenizer, prompt)
        max_len = self.model_config.context_length
        check_prompt(ids, self.model_config.vocab_size, max_len)
        check_logit_bias_ids(params.logit_bias, self.model_config.vocab_size)
        if blocks_for(len(ids) + 1, self.pool.block_size) > self.pool.num_blocks:
            raise TinyLLMError(
                f"prompt has {len(ids)} tokens, more than the KV pool holds "
                f"({self.pool.num_blocks} blocks of {self.pool.block_size})"
            )
        request_id = str(next(self._ids)) if request_id is None else str(request_id)
        if request_id in self.requests:
            raise TinyLLMError(f"request id {request_id!r} is already in use")
        pool_positions = self.pool.num_blocks * self.pool.block_size
        max_tokens = effective_max_tokens(len(ids), params.max_tokens, max_len, pool_positions)
        constraint = self.grammars.constraint(params.structured, wait=self.config.compile_grammars_on_add)
        req = Request.create(request_id, ids, params, max_tokens, self.tokenizer, self.eos_ids, constraint)
        spec = speculative or self.config.speculative
        if spec is not None:
            req.proposer = make_proposer(spec, self.drafts, max_len=len(ids) + max_tokens)
            req.num_draft_tokens = spec.num_draft_tokens
            req.pacing = DraftPacing(spec.num_draft_tokens) if spec.pacing else None
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

    def check_group(self) -> None:
        """Raise EngineDown if the tensor-parallel group lost a rank (a no-op on one process); for an idle
        caller, as a step finds out by itself."""
        if self.tensor_parallel is not None:
            self.tensor_parallel.check_ranks()

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ---- one step
    def step(self) -> list[RequestOutput]:
        """One forward over the scheduled batch; returns each touched request's new text and ids."""
        outputs, self._early = self._early, []
        outputs += self._fail_grammars()
        self._propose_drafts()
        plan = self.scheduler.schedule()
        if not plan.chunks:
            self._wait_for_masks()
            return outputs
        now = time.perf_counter()
        for chunk in plan.chunks:
            chunk.request.times.first_scheduled = chunk.request.times.first_scheduled or now
        sampling, logits, prompt_rows = self.runner.run(plan, self.kv.tables)
        for rows in prompt_rows:
            record_prompt_logprobs(rows)
        for chunk in plan.chunks:
            chunk.request.num_computed += chunk.num_tokens
        if sampling:
            with self.runner.threads_for(logits.shape[0]):
                outputs += self._sample(sampling, logits)
        for chunk in plan.chunks:
            if not chunk.request.status.is_finished:
                self.kv.commit(chunk.request)
        return outputs

    def _propose_drafts(self) -> None:
        """Speculation: each running request ready to decode gets up to k drafts to verify this step."""
        for req in self.scheduler.running:
            if req.proposer is None or req.draft_ids or req.num_computed != req.num_committed - 1:
                continue
            most = req.num_draft_tokens if req.pacing is None else req.pacing.next_length()
            num_drafts = min(most, req.tokens_left - 1)  # the target's own next token takes one
            if num_drafts > 0:
                req.draft_ids = req.proposer.propose(req.prompt_ids + req.output_ids, num_drafts)
                if req.constraint is not None and req.draft_ids:  # a mask per verified row
                    out = req.output_ids
                    req.constraint.prefetch([out + req.draft_ids[:i] for i in range(len(req.draft_ids) + 1)])

    def _constrained(self) -> list[Request]:
        return [r for r in (*self.scheduler.running, *self.scheduler.waiting) if r.constraint is not None]

    def _fail_grammars(self) -> list[RequestOutput]:
        """Fail, alone, each request whose grammar failed or ran past its budget on a grammar thread."""
        now, outputs = time.perf_counter(), []
        for req in self._constrained():
            error = req.constraint.failure()
            if error is not None:
                outputs.append(self._fail(req, error, now))
        return outputs

    def _wait_for_masks(self) -> None:
        """Nothing could run: every unfinished request waits for its grammar. Sleep until one is ready (a
        short while at most, so new requests and budgets are looked at again)."""
        pending = [job for r in self._constrained() if (job := r.constraint.pending()) is not None]
        if pending:
            wait_futures(pending, timeout=0.05, return_when=FIRST_COMPLETED)

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
            results[req.request_id], failures[req.request_id] = isolated(
                req,
                lambda req=req, i=i, n=n: verify_drafts(
                    logits[i : i + n],
                    req.draft_ids,
                    req.params,
                    req.prompt_ids,
                    req.output_ids,
                    req.rng,
                    req.constraint,
                    req.mirostat_mu(),
                ),
            )
        return [
            self._apply_or_fail(c.request, results.get(c.request.request_id), failures.get(c.request.request_id), now)
            for c in chunks
        ]

    def _apply_or_fail(self, req: Request, results: list | None, error: Exception | None, now: float):
        output, error = (None, error) if error is not None else isolated(req, lambda: self._apply(req, results, now))
        return output if error is None else self._fail(req, error, now)

    def _fail(self, req: Request, error: Exception, now: float) -> RequestOutput:
        self.scheduler.finish(req, RequestStatus.FINISHED_ERROR)  # its blocks back; the step goes on
        req.times.finished = now
        output = self._output(req, "", 0)
        output.error, output.error_kind = describe(error)
        return output

    def _apply(self, req: Request, results: list, now: float) -> RequestOutput:
        drafts = req.draft_ids
        req.draft_ids = []
        req.num_drafted += len(drafts)
        req.num_accepted += len(results) - 1
        req.num_sampling_forwards += 1
        if drafts and req.pacing is not None:
            req.pacing.record(len(drafts), len(results) - 1)
        applied = accept_tokens(req, results, now)
        if applied.finish is not None:
            self.scheduler.finish(req, applied.finish)
            req.times.finished = now
        elif drafts:  # keep the KV of the fed token and the accepted drafts; drop the rejected ones
            req.num_computed = req.num_committed - 1
            self.kv.truncate(req, req.num_computed)
            req.proposer.rollback(req.num_computed)
        if req.constraint is not None and not req.status.is_finished:  # the next masks, during others' steps
            req.constraint.prefetch([req.output_ids])
        return self._output(req, applied.text, applied.num_new, applied.reasoning)

    def _output(self, req: Request, text: str, n_new: int, reasoning: str = "") -> RequestOutput:
        new = req.output_ids[len(req.output_ids) - n_new :] if n_new else []
        # The prompt's logprobs travel once, on the request's first output.
        first = len(req.output_ids) == n_new and (n_new > 0 or req.status.is_finished)
        return RequestOutput(
            req.request_id,
            text,
            new,
            req.out.logprobs[len(req.output_ids) - n_new :] if n_new else [],
            req.status.is_finished,
            req.finish_reason,
            req.num_cached_tokens,
            len(req.prompt_ids),
            len(req.output_ids),
            prompt_logprobs=list(req.prompt_logprobs) if first and req.prompt_logprobs else None,
            reasoning=reasoning,
            reasoning_tokens=req.out.num_reasoning_tokens,
        )

    # ---- conveniences
    def pool_stats(self):
        return self.pool.stats()

    def num_running(self) -> int:
        return len(self.scheduler.running)

    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    def generation(self, request_id: str) -> Generation:
        """A finished (or running) request as a Generation."""
        return make_generation(self.requests[str(request_id)])

    def release(self, request_id: str) -> None:
        """Forget a finished request's record (its blocks were freed when it finished)."""
        req = self.requests.get(str(request_id))
        if req is not None and req.status.is_finished:
            del self.requests[str(request_id)]

    def add_requests(
        self, prompts: list, params: SamplingParams | list[SamplingParams], speculative: SpeculativeConfig | None = None
    ) -> list[str]:
        """Queue several requests: all of them valid, or none queued. Returns their ids in order."""
        plist = params if isinstance(params, list) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise TinyLLMError(f"got {len(plist)} sampling params for {len(prompts)} prompts")
        reqs = [self._make_request(p, sp, None, speculative) for p, sp in zip(prompts, plist)]
        for req in reqs:
            self._queue(req)
        return [r.request_id for r in reqs]

    def generate(self, prompts: list, params: SamplingParams | list[SamplingParams]) -> list[Generation]:
        """Run prompts to completion together; results in the order given."""
        ids = self.add_requests(prompts, params)
        while self.has_unfinished():
            self.step()
        results = [self.generation(i) for i in ids]
        for i in ids:
            self.release(i)
        return results
