"""generate(): prefill once (or in chunks), then one token per forward through a cache.

Data flows one way: prompt ids -> model -> sampler -> incremental detokenizer -> stop matcher -> text.
`iter_generate` yields text pieces as they become final and returns the Generation; `generate` drives it.
"""
from __future__ import annotations

import time
from typing import Callable, Generator as PyGenerator, Sequence

import torch

from .cache.kv_cache import KVCache
from .errors import TinyLLMError
from .generation import FinishReason, Generation, Timings, TokenLogprob
from .sampling.params import SamplingParams
from .sampling.rng import request_rng
from .sampling.sampler import sample
from .output_stream import OutputStream

CACHE_MODES = ("none", "contiguous", "paged")
_HF_DIMS = ("num_hidden_layers", "num_key_value_heads", "head_dim", "max_position_embeddings")


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


def _check_prompt(ids: list[int], vocab_size: int | None, max_len: int) -> None:
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


@torch.inference_mode()
def _prefill(model, ids: list[int], cache, chunk: int | None, device) -> torch.Tensor:
    """Run the prompt through the model (in chunks when asked); return the last position's logits [V]."""
    if cache is None:
        return model(torch.tensor([ids], device=device), last_only=True)[0, -1]
    step = chunk or len(ids)
    for start in range(0, len(ids), step):
        part = torch.tensor([ids[start:start + step]], device=device)  # [1, T]
        logits = model(part, cache=cache, last_only=True)
    return logits[0, -1]


def iter_generate(model, tok, prompt, p: SamplingParams, cache="contiguous", kv_dtype=torch.float32,
                  eos_ids: Sequence[int] = (), prefill_chunk: int | None = None
                  ) -> PyGenerator[str, None, Generation]:
    """Yield text pieces as they become final; return the Generation."""
    t_start = time.perf_counter()
    if not isinstance(p, SamplingParams):
        raise TinyLLMError(f"sampling parameters must be a SamplingParams, got {type(p).__name__}")
    if prefill_chunk is not None and (isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int)
                                      or prefill_chunk < 1):
        raise TinyLLMError(f"prefill_chunk must be a positive integer, got {prefill_chunk!r}")
    prompt_ids = prompt_ids_of(tok, prompt)
    _, _, _, max_len = cache_dims(model)
    _check_prompt(prompt_ids, getattr(model.config, "vocab_size", None), max_len)
    budget = max_len - len(prompt_ids)  # generated token i sits at position len(prompt) + i < max_len
    if p.max_tokens is not None:
        budget = min(budget, p.max_tokens)
    kv = make_cache(model, cache, len(prompt_ids) + budget, kv_dtype)
    stop_ids = set(p.stop_token_ids) | (set() if p.ignore_eos else set(eos_ids))
    device = next(model.parameters()).device
    rng = request_rng(p.seed)
    stream = OutputStream.create(tok, p.stop)
    ids = stream.ids
    timings = Timings()
    finish = FinishReason.LENGTH
    logits = _prefill(model, prompt_ids, kv, prefill_chunk, device)
    timings.prefill_s = time.perf_counter() - t_start
    t_first = None
    while len(ids) < budget:
        r = sample(logits, p, prompt_ids=prompt_ids, generated_ids=ids, rng=rng, position=len(ids))
        if t_first is None:
            t_first = time.perf_counter()
            timings.ttft_s = t_first - t_start
        if r.token in stop_ids:
            finish = FinishReason.STOP
            break
        piece = stream.add(r.token, TokenLogprob(r.token, r.logprob, list(r.top_logprobs), r.entropy))
        if piece:
            yield piece
        if stream.stopped:
            finish = FinishReason.STOP
            break
        if len(ids) == budget:
            break
        logits = _decode_step(model, prompt_ids, ids, kv, device)
    timings.decode_s = time.perf_counter() - t_first if t_first is not None else 0.0
    tail = stream.finish()
    if tail:
        yield tail
    if stream.stopped:
        finish = FinishReason.STOP
    timings.total_s = time.perf_counter() - t_start
    return Generation(text=stream.text, ids=ids, logprobs=stream.logprobs, timings=timings,
                      stats=_stats(prompt_ids, ids, timings, kv), finish_reason=finish.value, prompt_ids=prompt_ids)


@torch.inference_mode()
def _decode_step(model, prompt_ids, ids, kv, device) -> torch.Tensor:
    if kv is None:  # recompute over the whole sequence
        return model(torch.tensor([prompt_ids + ids], device=device), last_only=True)[0, -1]
    return model(torch.tensor([[ids[-1]]], device=device), cache=kv)[0, -1]


def _stats(prompt_ids, ids, t: Timings, kv) -> dict:
    return {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(ids),
        "prefill_tokens_per_s": len(prompt_ids) / t.prefill_s if t.prefill_s else 0.0,
        "decode_tokens_per_s": (len(ids) - 1) / t.decode_s if len(ids) > 1 and t.decode_s else 0.0,
        "kv_bytes": kv.nbytes() if kv is not None else 0,
    }


def generate(model, tok, prompt, p: SamplingParams, cache="contiguous", kv_dtype=torch.float32,
             on_text: Callable[[str], None] | None = None, eos_ids: Sequence[int] = (),
             prefill_chunk: int | None = None) -> Generation:
    """Generate a completion for `prompt` (text or ids); `on_text` receives each final text piece."""
    steps = iter_generate(model, tok, prompt, p, cache, kv_dtype, eos_ids, prefill_chunk)
    while True:
        try:
            piece = next(steps)
        except StopIteration as done:
            return done.value
        if on_text is not None:
            on_text(piece)
