"""generate(): prefill once (or in chunks), then one token per forward through a cache — or, with a
proposer, k drafted tokens verified per forward and the cache rolled back past the rejected ones.

Data flows one way: prompt ids -> model -> sampler -> incremental detokenizer -> stop matcher -> text.
`iter_generate` yields text pieces as they become final and returns the Generation; `generate` drives it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Generator as PyGenerator, Sequence

import torch

from .cache.kv_cache import KVCache
from .errors import TinyLLMError
from .generation import FinishReason, Generation, Timings, TokenLogprob
from .output_stream import OutputStream
from .sampling.params import SamplingParams
from .sampling.rng import request_rng
from .sampling.sampler import SampleResult, sample

CACHE_MODES = ("none", "contiguous", "paged")


def cache_dims(model) -> tuple[int, int, int, int]:
    """(n_layers, n_kv_heads, d_head, max_len) from our ModelConfig or a Hugging Face config."""
    c = model.config
    if hasattr(c, "num_layers") and hasattr(c, "num_kv_heads"):
        return c.num_layers, c.num_kv_heads, c.head_dim, c.max_position_embeddings
    n_heads = c.num_attention_heads
    n_kv = getattr(c, "num_key_value_heads", None) or n_heads
    d_head = getattr(c, "head_dim", None) or c.hidden_size // n_heads
    return c.num_hidden_layers, n_kv, d_head, c.max_position_embeddings


def prompt_ids_of(tok, prompt: str | Sequence[int]) -> list[int]:
    if isinstance(prompt, str):
        if not prompt:
            raise TinyLLMError("prompt is empty; expected at least one character or token id")
        return tok.encode(prompt)
    ids = [int(i) for i in prompt]
    if not ids:
        raise TinyLLMError("prompt is empty; expected at least one character or token id")
    return ids


def check_prompt(ids: list[int], vocab_size: int | None, max_len: int) -> None:
    if vocab_size is not None and any(not 0 <= i < vocab_size for i in ids):
        bad = next(i for i in ids if not 0 <= i < vocab_size)
        raise TinyLLMError(f"prompt token id {bad} is out of range [0, {vocab_size})")
    if len(ids) >= max_len:
        raise TinyLLMError(f"prompt has {len(ids)} tokens, but the model's context holds {max_len} "
                           f"(at most {max_len - 1} prompt tokens leave room for one new token)")


def make_cache(model, cache, capacity: int, kv_dtype: torch.dtype):
    """The cache object for a mode name ("none" gives None), or the caller's own cache object."""
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


@dataclass
class _Run:
    """One generation's state, shared by the plain and the speculative loops."""
    model: object
    prompt_ids: list[int]
    params: SamplingParams
    kv: object
    budget: int
    stop_ids: set[int]
    stream: OutputStream
    device: torch.device
    rng: object = None
    finish: FinishReason = FinishReason.LENGTH
    spec: dict = field(default_factory=lambda: {"drafted": 0, "accepted": 0, "target_forwards": 0})
    fed: list[int] = field(default_factory=list)  # without a cache: every token fed so far

    @property
    def ids(self) -> list[int]:
        return self.stream.ids

    def accept(self, r: SampleResult) -> str | None:
        """Apply one sampled token; the text it makes final, or None once generation has ended."""
        if r.token in self.stop_ids:
            self.finish = FinishReason.STOP
            return None
        piece = self.stream.add(r.token, TokenLogprob(r.token, r.logprob, list(r.top_logprobs), r.entropy))
        if self.stream.stopped:
            self.finish = FinishReason.STOP
        return piece

    @property
    def done(self) -> bool:
        return self.finish is FinishReason.STOP or len(self.ids) >= self.budget

    def rollback(self, n: int) -> None:
        """Keep the first n fed positions."""
        if self.kv is None:
            del self.fed[n:]
        else:
            self.kv.truncate(n)

    @torch.inference_mode()
    def forward(self, new_ids: list[int], rows: str = "last") -> torch.Tensor:
        """Feed new tokens; logits of the last one [V] (rows="last") or of all [T, V] (rows="all")."""
        self.spec["target_forwards"] += 1
        if self.kv is None:  # recompute over the whole sequence
            self.fed += new_ids
            x = torch.tensor([self.fed], device=self.device)
            logits = self.model(x)[0] if rows == "all" else self.model(x, last_only=True)[0]
            return logits[-len(new_ids):] if rows == "all" else logits[-1]
        logits = self.model(torch.tensor([new_ids], device=self.device), cache=self.kv, last_only=rows == "last")[0]
        return logits if rows == "all" else logits[-1]


def _prefill(run: _Run, chunk: int | None) -> torch.Tensor:
    """Run the prompt through the model (in chunks when asked); the last position's logits [V]."""
    ids = run.prompt_ids
    if run.kv is None:
        return run.forward(ids)
    step = chunk or len(ids)
    for start in range(0, len(ids), step):
        logits = run.forward(ids[start:start + step])
    return logits


def _plain_loop(run: _Run, logits: torch.Tensor, t_first: list) -> PyGenerator[str, None, None]:
    while True:
        r = sample(logits, run.params, prompt_ids=run.prompt_ids, generated_ids=run.ids, rng=run.rng,
                   position=len(run.ids))
        t_first.append(time.perf_counter())
        piece = run.accept(r)
        if piece:
            yield piece
        if piece is None or run.done:
            return
        logits = run.forward([run.ids[-1]])


def _speculative_loop(run: _Run, logits: torch.Tensor, proposer, k: int, t_first: list) -> PyGenerator[str, None, None]:
    from .speculative.verify import verify_drafts

    r = sample(logits, run.params, prompt_ids=run.prompt_ids, generated_ids=run.ids, rng=run.rng, position=0)
    t_first.append(time.perf_counter())
    results = [r]
    while True:
        for r in results:
            piece = run.accept(r)
            if piece:
                yield piece
            if piece is None or run.done:
                return
        n_committed = len(run.prompt_ids) + len(run.ids)
        drafts = proposer.propose(run.prompt_ids + run.ids, min(k, run.budget - len(run.ids) - 1))
        rows = run.forward([run.ids[-1]] + drafts, rows="all")  # [1 + m, V]
        results = verify_drafts(rows, drafts, run.params, run.prompt_ids, run.ids, run.rng)
        accepted = len(results) - 1
        run.spec["drafted"] += len(drafts)
        run.spec["accepted"] += accepted
        run.rollback(n_committed + accepted)  # keep the fed token and the accepted drafts only
        proposer.rollback(n_committed + accepted)


def iter_generate(model, tok, prompt, p: SamplingParams, cache="contiguous", kv_dtype=torch.float32,
                  eos_ids: Sequence[int] = (), prefill_chunk: int | None = None, proposer=None,
                  num_draft_tokens: int = 4) -> PyGenerator[str, None, Generation]:
    """Yield text pieces as they become final; return the Generation."""
    t_start = time.perf_counter()
    run = _setup(model, tok, prompt, p, cache, kv_dtype, eos_ids, prefill_chunk)
    logits = _prefill(run, prefill_chunk)
    run.spec["target_forwards"] = 0  # count decode forwards only; the prefill made the first token
    prefill_s = time.perf_counter() - t_start
    t_first: list[float] = []
    loop = _plain_loop(run, logits, t_first) if proposer is None else \
        _speculative_loop(run, logits, proposer, num_draft_tokens, t_first)
    yield from loop
    tail = run.stream.finish()
    if tail:
        yield tail
    if run.stream.stopped:
        run.finish = FinishReason.STOP
    end = time.perf_counter()
    timings = Timings(prefill_s=prefill_s, decode_s=end - t_first[0], ttft_s=t_first[0] - t_start, total_s=end - t_start)
    return Generation(text=run.stream.text, ids=run.ids, logprobs=run.stream.logprobs, timings=timings,
                      stats=_stats(run, timings, proposer is not None), finish_reason=run.finish.value,
                      prompt_ids=run.prompt_ids)


def _setup(model, tok, prompt, p, cache, kv_dtype, eos_ids, prefill_chunk) -> _Run:
    """Validate everything before any state is created."""
    if not isinstance(p, SamplingParams):
        raise TinyLLMError(f"sampling parameters must be a SamplingParams, got {type(p).__name__}")
    if prefill_chunk is not None and (isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int)
                                      or prefill_chunk < 1):
        raise TinyLLMError(f"prefill_chunk must be a positive integer, got {prefill_chunk!r}")
    prompt_ids = prompt_ids_of(tok, prompt)
    _, _, _, max_len = cache_dims(model)
    check_prompt(prompt_ids, getattr(model.config, "vocab_size", None), max_len)
    budget = max_len - len(prompt_ids)  # generated token i sits at position len(prompt) + i < max_len
    if p.max_tokens is not None:
        budget = min(budget, p.max_tokens)
    kv = make_cache(model, cache, len(prompt_ids) + budget, kv_dtype)
    stop_ids = set(p.stop_token_ids) | (set() if p.ignore_eos else set(eos_ids))
    device = next(model.parameters()).device
    return _Run(model, prompt_ids, p, kv, budget, stop_ids, OutputStream.create(tok, p.stop), device,
                rng=request_rng(p.seed))


def _stats(run: _Run, t: Timings, speculative: bool) -> dict:
    n = len(run.ids)
    stats = {
        "prompt_tokens": len(run.prompt_ids),
        "completion_tokens": n,
        "prefill_tokens_per_s": len(run.prompt_ids) / t.prefill_s if t.prefill_s else 0.0,
        "decode_tokens_per_s": (n - 1) / t.decode_s if n > 1 and t.decode_s else 0.0,
        "kv_bytes": run.kv.nbytes() if run.kv is not None else 0,
    }
    if speculative:
        s = run.spec
        stats.update(drafted=s["drafted"], accepted=s["accepted"],
                     acceptance_rate=s["accepted"] / s["drafted"] if s["drafted"] else 0.0,
                     tokens_per_target_forward=n / max(1, s["target_forwards"] + 1))
    return stats


def generate(model, tok, prompt, p: SamplingParams, cache="contiguous", kv_dtype=torch.float32,
             on_text: Callable[[str], None] | None = None, eos_ids: Sequence[int] = (),
             prefill_chunk: int | None = None, proposer=None, num_draft_tokens: int = 4) -> Generation:
    """Generate a completion for `prompt` (text or ids); `on_text` receives each final text piece.
    With a proposer (tinyllm.speculative), drafts are verified k at a time; the output is unchanged."""
    steps = iter_generate(model, tok, prompt, p, cache, kv_dtype, eos_ids, prefill_chunk, proposer, num_draft_tokens)
    while True:
        try:
            piece = next(steps)
        except StopIteration as done:
            return done.value
        if on_text is not None:
            on_text(piece)
