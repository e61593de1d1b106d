"""llama.cpp serving many requests at once, as its own server does with parallel slots: each step one
`llama_decode` of a batch that holds every running request's last token, then prompt tokens up to the token
budget, each request a sequence of its own in the KV cache. Greedy over the logits of each sequence's
last token, EOS ignored, the same requests, token budget and threads as our engine's run.

Built on llama-cpp-python's low-level bindings (the `bench` extra): its `Llama` class runs one sequence."""

from __future__ import annotations

import logging
import time

from . import common
from .workload import Work


class _Request:
    def __init__(self, seq: int, w: Work):
        self.seq, self.ids, self.max_tokens = seq, list(w.ids), w.max_tokens
        self.fed = 0  # prompt tokens in the cache
        self.out: list[int] = []
        self.times: list[float] = []

    def decoding(self) -> bool:
        return self.fed == len(self.ids) and 0 < len(self.out) < self.max_tokens

    def prefilling(self) -> bool:
        return self.fed < len(self.ids)


class _Batch:
    """A llama_batch of up to `size` tokens, each in one sequence, filled from slot 0 every step."""

    def __init__(self, size: int):
        import llama_cpp

        self.raw = llama_cpp.llama_batch_init(size, 0, 1)
        self.size, self.n = size, 0

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        b, i = self.raw, self.n
        b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, int(logits)
        b.seq_id[i][0] = seq
        self.n += 1
        return i

    def free(self) -> None:
        import llama_cpp

        llama_cpp.llama_batch_free(self.raw)


def _context(model, n_seqs: int, per_seq: int, budget: int, threads: int):
    import llama_cpp

    p = llama_cpp.llama_context_default_params()
    p.n_ctx = n_seqs * per_seq
    p.n_batch = p.n_ubatch = budget
    p.n_seq_max = n_seqs
    p.kv_unified = False  # a cache stream per sequence: attention reads only its own (faster here than one)
    p.n_threads = p.n_threads_batch = threads
    p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED  # as the decode benchmark's Llama: the same numbers
    ctx = llama_cpp.llama_init_from_model(model, p)
    if not ctx:
        raise RuntimeError(f"llama.cpp could not make a context of {n_seqs} sequences of {per_seq} tokens")
    return ctx


def drive(path: str, work: list[Work], threads: int, budget: int, keep_ids: bool = False) -> dict:
    """Every request of `work` at once through llama.cpp on the GGUF at `path` (arrival times are not
    modelled: all arrive at the start). The same summary as our engine's run (and with keep_ids, each
    request's output ids in order)."""
    import llama_cpp

    if budget < len(work):
        raise ValueError(f"a token budget of {budget} cannot hold one decode token of each of {len(work)} requests")
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # its loader's notes, as Llama(verbose=False)
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(path.encode(), llama_cpp.llama_model_default_params())
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path!r}")
    vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    per_seq = -(-max(len(w.ids) + w.max_tokens for w in work) // 256) * 256  # llama.cpp pads a context to 256s
    ctx = _context(model, len(work), per_seq, budget, threads)
    batch = _Batch(budget)
    reqs = [_Request(s, w) for s, w in enumerate(work)]
    steps = []  # (start, end, tokens out, decode only)
    try:
        t0 = time.perf_counter()
        while any(len(r.out) < r.max_tokens for r in reqs):
            rows, pure = _fill(batch, reqs)
            s = time.perf_counter()
            _decode(ctx, batch, rows, vocab)
            now = time.perf_counter()
            for r, _ in rows:
                r.times.append(now)
            steps.append((s, now, len(rows), pure))
        end = time.perf_counter()
    finally:
        batch.free()
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)
    out = _summary(reqs, steps, t0, end, budget)
    if keep_ids:
        out["ids"] = [r.out for r in reqs]
    return out


def _fill(batch: _Batch, reqs: list[_Request]) -> tuple[list[tuple[_Request, int]], bool]:
    """One step's batch: each decoding request's last token first, then prompt tokens in arrival order up to the
    budget. Returns (request, batch row) for each row whose logits pick a token, and whether the step only
    decodes."""
    batch.n, rows = 0, []
    for r in reqs:  # decode tokens first
        if r.decoding():
            rows.append((r, batch.add(r.out[-1], len(r.ids) + len(r.out) - 1, r.seq, True)))
    pure = not any(r.prefilling() for r in reqs)
    for r in reqs:  # then prompt tokens, in arrival order, up to the budget
        while r.prefilling() and batch.n < batch.size:
            last = r.fed == len(r.ids) - 1
            i = batch.add(r.ids[r.fed], r.fed, r.seq, last)
            r.fed += 1
            if last:
                rows.append((r, i))
    batch.raw.n_tokens = batch.n
    return rows, pure


def _decode(ctx, batch: _Batch, rows: list[tuple[_Request, int]], vocab: int) -> None:
    """Run the batch, and append each row's greedy token to its request."""
    import llama_cpp
    import numpy as np

    rc = llama_cpp.llama_decode(ctx, batch.raw)
    if rc != 0:
        raise RuntimeError(f"llama_decode returned {rc}")
    for r, i in rows:
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), shape=(vocab,))
        r.out.append(int(logits.argmax()))


def _summary(reqs: list[_Request], steps: list, t0: float, end: float, budget: int) -> dict:
    pure = [(e - s, n) for s, e, n, p in steps if p]
    out_tokens = sum(len(r.out) for r in reqs)
    return {
        "requests": len(reqs),
        "token_budget": budget,
        "wall_s": end - t0,
        "load_1min": common.load_now(),
        "output_tokens": out_tokens,
        "prompt_tokens": sum(len(r.ids) for r in reqs),
        "output_tokens_per_s": common.per_second(out_tokens, end - t0),
        "decode_tokens_per_s": common.per_second(sum(n for _, n in pure), sum(d for d, _ in pure)),
        "steps": len(steps),
        "decode_only_steps": len(pure),
        "ttft_s": common.summary(r.times[0] - t0 for r in reqs),
        "itl_s": common.summary(b - a for r in reqs for a, b in zip(r.times, r.times[1:])),
    }
