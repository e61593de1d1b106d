"""The reference loop: one request, start to end, through a plain cache — prefill, then one token per
forward (or k drafts verified per forward, the cache rolled back past the rejected ones).

This is not a product path: `LLM` runs every request on the engine. It is the independent oracle that the
tests and `tinyllm bench decode` hold the engine against (no cache = full recompute, a contiguous KVCache, a
paged cache for one sequence, or a cache object of the caller's). It shares prompt validation
(engine/prompt.py) and token acceptance (engine/request.py) with the engine, and nothing else.

Data flows one way: prompt ids -> model -> sampler -> incremental detokenizer -> stop matcher -> text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from collections.abc import Generator as PyGenerator

import torch

from .cache.kv_cache import KVCache
from .config import parse_kv_dtype
from .engine.model_parts import ModelParts
from .engine.prompt import check_prompt, effective_max_tokens, prompt_ids_of
from .engine.request import Request, accept_tokens, make_generation
from .errors import TinyLLMError
from .grammar.constraint import Grammars
from .model.step import LAST, CacheStep, CausalStep
from .outputs import Generation
from .sampling.logit_bias import check_logit_bias_ids
from .sampling.params import SamplingParams
from .sampling.sampler import SampleResult, sample
from .speculative.factory import DraftModels, make_proposer
from .speculative.verify import verify_drafts

CACHE_MODES = ("none", "contiguous", "paged")
ENGINE_CACHE = "paged"  # the cache `LLM` names its engine by: its other cache options run this loop


def cache_dims(model) -> tuple[int, int, int, int]:
    """(n_layers, n_kv_heads, d_head, max_len) from our ModelConfig or a Hugging Face config."""
    c = model.config
    if hasattr(c, "num_layers") and hasattr(c, "num_kv_heads"):
        return c.num_layers, c.num_kv_heads, c.head_dim, c.max_position_embeddings
    n_heads = c.num_attention_heads
    n_kv = getattr(c, "num_key_value_heads", None) or n_heads
    d_head = getattr(c, "head_dim", None) or c.hidden_size // n_heads
    return c.num_hidden_layers, n_kv, d_head, c.max_position_embeddings


def make_cache(model, cache, capacity: int, kv_dtype: torch.dtype):
    """The cache object for a mode name ("none" gives None), or the caller's own (empty) cache object."""
    if not isinstance(cache, str):
        if cache.seq_len() != 0:
            raise TinyLLMError(f"a cache passed to generate must be empty, it holds {cache.seq_len()} positions")
        return cache
    if cache not in CACHE_MODES:
        raise TinyLLMError(f"cache must be one of {', '.join(CACHE_MODES)} or a cache object, got {cache!r}")
    if cache == "none":
        return None
    n_layers, n_kv, d_head, _ = cache_dims(model)
    device = next(model.parameters()).device
    if cache == "paged":
        from .cache.paged_cache import PagedKVCache

        return PagedKVCache.for_one_sequence(n_layers, n_kv, d_head, capacity, dtype=kv_dtype, device=device)
    return KVCache(n_layers, n_kv, d_head, capacity, dtype=kv_dtype, device=device)


class SequenceState:
    """One sequence's model state: feed it new ids, get logits; without a cache every feed recomputes the
    whole sequence."""

    def __init__(self, model, kv):
        self.model, self.kv = model, kv
        self.device = next(model.parameters()).device
        self.fed: list[int] = []  # without a cache: every token fed so far

    @torch.inference_mode()
    def feed(self, new_ids: list[int], rows: str = "last") -> torch.Tensor:
        """Logits of the last new token [V] (rows="last") or of every new token [T, V] (rows="all")."""
        last = rows == "last"
        logit_rows = LAST if last else None
        if self.kv is None:  # recompute over the whole sequence
            self.fed += new_ids
            step = CausalStep(len(self.fed), self.device, logit_rows)
            logits = self.model(torch.tensor([self.fed], device=self.device), step)[0]  # [T, V]
            return logits[-1] if last else logits[-len(new_ids) :]
        step = CacheStep(self.kv, len(new_ids), logit_rows)
        logits = self.model(torch.tensor([new_ids], device=self.device), step)[0]  # [T, V]
        return logits[-1] if last else logits

    def rollback(self, n: int) -> None:
        """Keep the first n fed positions."""
        if self.kv is None:
            del self.fed[n:]
        else:
            self.kv.truncate(n)


def prefill(seq: SequenceState, ids: list[int], chunk: int | None) -> torch.Tensor:
    """Run the prompt through the model (in chunks of `chunk` when a cache allows); last logits [V]."""
    if seq.kv is None:
        return seq.feed(ids)
    step = chunk or len(ids)
    for start in range(0, len(ids), step):
        logits = seq.feed(ids[start : start + step])
    return logits


def sample_next(req: Request, logits: torch.Tensor) -> SampleResult:
    """The request's token at its next position, from that position's logits [V]."""
    return sample(
        logits,
        req.params,
        prompt_ids=req.prompt_ids,
        generated_ids=req.output_ids,
        rng=req.rng,
        position=len(req.output_ids),
        constraint=req.constraint,
        mu=req.mirostat_mu(),
    )


def decode_one(seq: SequenceState, req: Request) -> list[SampleResult]:
    """Feed the last generated token; sample the next."""
    return [sample_next(req, seq.feed([req.output_ids[-1]]))]


def speculative_step(seq: SequenceState, req: Request, proposer, k: int) -> list[SampleResult]:
    """Feed the last token and up to k drafts in one forward, keep the accepted drafts' KV, and return the
    accepted drafts and the target's own next token."""
    num_committed = req.num_committed
    drafts = proposer.propose(req.prompt_ids + req.output_ids, min(k, req.tokens_left - 1))
    rows = seq.feed([req.output_ids[-1]] + drafts, rows="all")  # [1 + m, V]
    results = verify_drafts(
        rows, drafts, req.params, req.prompt_ids, req.output_ids, req.rng, req.constraint, req.mirostat_mu()
    )
    req.num_drafted += len(drafts)
    req.num_accepted += len(results) - 1
    seq.rollback(num_committed + len(results) - 1)  # keep the fed token and the accepted drafts only
    proposer.rollback(num_committed + len(results) - 1)
    return results


def iter_generate(
    model,
    tok,
    prompt,
    p: SamplingParams,
    cache="contiguous",
    kv_dtype=torch.float32,
    eos_ids: Sequence[int] = (),
    prefill_chunk: int | None = None,
    proposer=None,
    num_draft_tokens: int = 4,
    grammars: Grammars | None = None,
) -> PyGenerator[str, None, Generation]:
    """Yield text pieces as they become final; return the Generation. `grammars` compiles p.structured (one
    is built for the call when not given)."""
    arrival = time.perf_counter()
    req, seq = _setup(model, tok, prompt, p, cache, kv_dtype, eos_ids, prefill_chunk, grammars)
    req.times.arrival = req.times.first_scheduled = arrival
    results = [sample_next(req, prefill(seq, req.prompt_ids, prefill_chunk))]
    while True:
        req.num_sampling_forwards += 1
        accepted = accept_tokens(req, results, time.perf_counter())
        if accepted.text:
            yield accepted.text
        if accepted.finish is not None:
            req.status = accepted.finish
            break
        results = decode_one(seq, req) if proposer is None else speculative_step(seq, req, proposer, num_draft_tokens)
    req.times.finished = time.perf_counter()
    return make_generation(req)


def _setup(
    model, tok, prompt, p, cache, kv_dtype, eos_ids, prefill_chunk, grammars: Grammars | None
) -> tuple[Request, SequenceState]:
    """Validate everything before any state is created."""
    if not isinstance(p, SamplingParams):
        raise TinyLLMError(f"sampling parameters must be a SamplingParams, got {type(p).__name__}")
    if prefill_chunk is not None and (
        isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int) or prefill_chunk < 1
    ):
        raise TinyLLMError(f"prefill_chunk must be a positive integer, got {prefill_chunk!r}")
    prompt_ids = prompt_ids_of(tok, prompt)
    _, _, _, max_len = cache_dims(model)
    check_prompt(prompt_ids, getattr(model.config, "vocab_size", None), max_len)
    check_logit_bias_ids(p.logit_bias, getattr(model.config, "vocab_size", None))
    max_tokens = effective_max_tokens(len(prompt_ids), p.max_tokens, max_len)
    if p.structured is not None and grammars is None:
        grammars = Grammars(tok, model.config.vocab_size, eos_ids)
    constraint = grammars.constraint(p.structured) if grammars is not None else None
    kv = make_cache(model, cache, len(prompt_ids) + max_tokens, kv_dtype)
    return Request.create("reference", prompt_ids, p, max_tokens, tok, eos_ids, constraint), SequenceState(model, kv)


def generate(
    model,
    tok,
    prompt,
    p: SamplingParams,
    cache="contiguous",
    kv_dtype=torch.float32,
    on_text: Callable[[str], None] | None = None,
    eos_ids: Sequence[int] = (),
    prefill_chunk: int | None = None,
    proposer=None,
    num_draft_tokens: int = 4,
    grammars: Grammars | None = None,
) -> Generation:
    """Generate a completion for `prompt` (text or ids) with the reference loop; `on_text` receives each
    final text piece. With a proposer (tinyllm.speculative), drafts are verified k at a time; the output is
    unchanged."""
    steps = iter_generate(
        model, tok, prompt, p, cache, kv_dtype, eos_ids, prefill_chunk, proposer, num_draft_tokens, grammars
    )
    while True:
        try:
            piece = next(steps)
        except StopIteration as done:
            return done.value
        if on_text is not None:
            on_text(piece)


class ReferenceLoop:
    """An LLM's way into this loop (its `cache="none"|"contiguous"` or a cache object): its model parts, and
    the draft models its speculative calls load once."""

    def __init__(self, parts: ModelParts):
        self.parts = parts
        self.drafts = DraftModels(parts.model, parts.tokenizer)

    def steps(self, prompt, p, cache, kv_dtype, prefill_chunk, spec) -> PyGenerator[str, None, Generation]:
        """iter_generate over the parts: the text pieces, then the Generation."""
        if self.parts.tensor_parallel is not None:
            raise TinyLLMError(
                f"cache={cache!r} runs the reference loop on one process; a tensor-parallel LLM "
                f"runs on its engine (cache={ENGINE_CACHE!r})"
            )
        proposer, k = None, 0
        if spec is not None:
            proposer, k = make_proposer(spec, self.drafts), spec.num_draft_tokens
        model = self.parts.model
        dtype = model.dtype if kv_dtype is None else parse_kv_dtype(kv_dtype)
        return iter_generate(
            model,
            self.parts.tokenizer,
            prompt,
            p,
            cache=cache,
            kv_dtype=dtype,
            eos_ids=self.parts.eos_ids,
            prefill_chunk=prefill_chunk,
            proposer=proposer,
            num_draft_tokens=k,
            grammars=self.parts.grammars,
        )

    def generate(self, prompt, p, cache, kv_dtype, prefill_chunk, spec) -> Generation:
        steps = self.steps(prompt, p, cache, kv_dtype, prefill_chunk, spec)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
