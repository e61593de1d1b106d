"""Where a batch-1 decode token's time goes on the product path: the engine's native decode step (its own
clock per phase: matmuls, attention, the rest; the embedding lookup counts with the rest), the head (final
norm, vocabulary matmul), the runner's Python (the step's arrays, the calls) and everything around the forward
(scheduling, sampling, detokenizing). And what a speculative verification costs: the runner's forward with K
rows of one sequence (K - 1 drafts and the last token) against its forward with one row."""

from __future__ import annotations

import time
from contextlib import contextmanager


@contextmanager
def _timed(obj, name: str, times: list):
    """Within: each call of obj.name appends its wall seconds to times."""
    had_own = name in vars(obj)
    inner = getattr(obj, name)

    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            times.append(time.perf_counter() - t)

    setattr(obj, name, wrapper)
    try:
        yield
    finally:
        if had_own:
            setattr(obj, name, inner)
        else:
            delattr(obj, name)


def engine_breakdown(llm, ids: list[int], steps: int) -> dict:
    """ms per token of greedy decoding `steps` tokens after `ids` through LLM.generate, split by part."""
    import torch

    from ..sampling import SamplingParams

    params = SamplingParams(max_tokens=steps, temperature=0.0, ignore_eos=True)
    llm.generate(ids, params=params)  # the engine, the kernels and the caches made once
    runner = llm._shared.engine.runner
    stack = runner.fused
    if stack is None:
        return {"native_step": False}
    native, head, steps_s, after_prefill = [], [], [], []
    stack.timings = torch.zeros(3, dtype=torch.long)  # ns: matmuls, attention, other
    prefill_run = stack.run_tokens

    def first_call_noted(*args, **kwargs):  # the phases of the decode steps only: those after the first call
        out = prefill_run(*args, **kwargs)
        if not after_prefill:
            after_prefill.append(stack.timings.clone())
        return out

    stack.run_tokens = first_call_noted
    try:
        with _timed(stack, "run_tokens", native), _timed(stack, "head", head), _timed(runner, "run", steps_s):
            gen = llm.generate(ids, params=params)
        phases = ((stack.timings - after_prefill[0]).double() / 1e6).tolist()
    finally:
        stack.timings = None
        del stack.run_tokens
    n = len(gen.ids)  # the first token comes from the prefill step; the n - 1 decode steps follow
    decode_s = gen.timings.total_s - gen.timings.prefill_s
    native_s, head_s, steps_s = sum(native[1:]), sum(head[1:]), sum(steps_s[1:])  # without the prefill step's
    per = lambda s: 1000 * s / (n - 1)  # noqa: E731
    return {
        "native_step": True,
        "wall_ms_per_token": per(decode_s),
        "tokens_per_s": (n - 1) / decode_s,
        "ms_per_token": {
            "matmul (layers)": phases[0] / (n - 1),
            "attention": phases[1] / (n - 1),
            "norms, rotary, residuals": phases[2] / (n - 1),
            "head (norm + vocabulary matmul)": per(head_s),
            "runner (step arrays, the calls)": per(steps_s - native_s - head_s),
            "engine (schedule, sample, detokenize)": per(decode_s - steps_s),
        },
    }


class _FixedDrafts:
    """A proposer that drafts k copies of the last token at every step, so each decode step verifies k + 1 rows
    whatever the target accepts (the output stays plain decoding's)."""

    def propose(self, ids, k: int) -> list[int]:
        return [ids[-1]] * k

    def rollback(self, num_tokens: int) -> None:
        pass


def _forwards(engine, ids: list[int], spec, count: int) -> list[tuple[int, float]]:
    """(rows, seconds) of the first count + 1 runner forwards (the prompt's, then count decode steps) of one
    greedy request on engine; the request asks for enough tokens that none of them runs short of drafts."""
    from ..sampling import SamplingParams

    k = 0 if spec is None else spec.num_draft_tokens
    params = SamplingParams(max_tokens=(count + 1) * (k + 1) + 1, temperature=0.0, ignore_eos=True)
    calls: list[tuple[int, float]] = []
    inner = engine.runner.run

    def run(step, tables):
        t = time.perf_counter()
        try:
            return inner(step, tables)
        finally:
            calls.append((sum(c.num_tokens for c in step.chunks), time.perf_counter() - t))

    rid = engine.add_request(ids, params, speculative=spec)
    if spec is not None:
        engine.requests[rid].proposer = _FixedDrafts()
    engine.runner.run = run
    try:
        while engine.has_unfinished() and len(calls) <= count:
            engine.step()
    finally:
        del engine.runner.run
        engine.abort(rid)
        engine.release(rid)
    return calls


def verification_ms(llm, ids: list[int], steps: int, rows: list[int], rounds: int = 3) -> dict:
    """Median ms of the runner's forward at one row (a decode step) and at each K of rows (a verification of
    K - 1 drafts), over `rounds` requests of `steps` decode steps each after ids, the row counts taking turns
    (this machine's memory has slow spells of seconds: one row count measured after the other can land in one),
    after a first request each that made the engine's caches."""
    import statistics

    from ..speculative.proposer import SpeculativeConfig

    engine = llm.engine()
    engine.storage.prefault()  # a fresh pool's pages are faulted in on first write: not a step's cost
    specs = {1: None, **{k: SpeculativeConfig("ngram", num_draft_tokens=k - 1, pacing=False) for k in rows}}
    times: dict[int, list[float]] = {k: [] for k in specs}
    for spec in specs.values():
        _forwards(engine, ids, spec, steps)
    for _ in range(rounds):
        for k, spec in specs.items():
            times[k] += [s for n, s in _forwards(engine, ids, spec, steps) if n == k]
    forward_ms = {str(k): 1000 * statistics.median(t) if t else None for k, t in times.items()}  # str: JSON's keys
    one = forward_ms["1"]
    return {
        "forward_ms": forward_ms,
        "over_one_row": {k: ms / one for k, ms in forward_ms.items() if ms is not None and one},
        "forwards_measured": steps * rounds,
    }
