"""The serving workload: seeded requests of mixed prompt and output lengths over real text, driven through
the Engine (all at once, or at Poisson arrival times) and through HF transformers' static-batch generate.

Latency is counted from each request's intended arrival, so time a request waits for the step in
progress to end is part of its time to first token."""

from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass

from . import common


@dataclass
class Work:
    ids: list[int]
    max_tokens: int
    arrival: float = 0.0  # seconds after the run starts


def make_workload(tokenizer, n: int, prompt_range, output_range, seed: int) -> list[Work]:
    rng = random.Random(seed)
    lengths = [rng.randint(*prompt_range) for _ in range(n)]
    outputs = [rng.randint(*output_range) for _ in range(n)]
    prompts = common.windows(common.corpus_ids(tokenizer), lengths, seed)
    return [Work(p, m) for p, m in zip(prompts, outputs)]


def poisson(work: list[Work], rate: float, seed: int) -> list[Work]:
    """The same requests arriving with exponential gaps of mean 1/rate seconds."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for w in work:
        out.append(Work(w.ids, w.max_tokens, t))
        t += rng.expovariate(rate)
    return out


def _decode_only(engine) -> bool:
    """Whether the next step is pure decode: every running request has only its last token to feed and no
    waiting request can be admitted."""
    running = engine.scheduler.running
    if any(r.num_tokens - r.num_computed != 1 for r in running):
        return False
    return engine.num_waiting() == 0 or len(running) >= engine.config.max_num_seqs


def drive_engine(engine, work: list[Work], keep_ids: bool = False, keep_timeline: bool = False) -> dict:
    """Add each request at its arrival time while stepping; return per-request and per-step timings (with
    keep_ids, every request's output ids in arrival order; with keep_timeline, after each step its end in
    seconds from the start, the requests running and the KV blocks held)."""
    from ..sampling.params import SamplingParams

    pending = deque(sorted(work, key=lambda w: w.arrival))
    arrivals, steps = {}, []
    t0 = time.perf_counter()
    while pending or engine.has_unfinished():
        now = time.perf_counter() - t0
        while pending and pending[0].arrival <= now:
            w = pending.popleft()
            rid = engine.add_request(w.ids, SamplingParams(temperature=0, max_tokens=w.max_tokens, ignore_eos=True))
            arrivals[rid] = t0 + w.arrival
        if not engine.has_unfinished():
            time.sleep(max(0.0, pending[0].arrival - now))
            continue
        pure = _decode_only(engine)
        s = time.perf_counter()
        outs = engine.step()
        used = engine.pool.num_blocks - engine.pool.num_free  # pool_stats() costs O(free blocks) a call
        steps.append((s, time.perf_counter(), sum(len(o.token_ids) for o in outs), pure, engine.num_running(), used))
    end = time.perf_counter()
    gens = {rid: engine.generation(rid) for rid in arrivals}
    out = summarize_engine(gens, arrivals, steps, t0, end)
    if keep_ids:
        out["ids"] = [g.ids for g in gens.values()]
    if keep_timeline:
        out["timeline"] = [[e - t0, running, used] for _, e, _, _, running, used in steps]
    return out


def summarize_engine(gens: dict, arrivals: dict, steps: list, t0: float, end: float) -> dict:
    """Totals, rates and latency percentiles of one engine run; steps are (start, end, tokens out,
    decode only, running after, blocks used after)."""
    ttft, itl, out_tokens, cached = [], [], 0, 0
    for rid, g in gens.items():
        times = g.stats["token_times"]
        out_tokens += len(g.ids)
        cached += g.stats["cached_tokens"]
        if times:
            ttft.append(times[0] - arrivals[rid])
            itl += [b - a for a, b in zip(times, times[1:])]
    pure = [(e - s, n) for s, e, n, p, *_ in steps if p]
    per_request = [u / r for *_, r, u in steps if r]
    return {
        "requests": len(gens),
        "wall_s": end - t0,
        "load_1min": common.load_now(),
        "output_tokens": out_tokens,
        "prompt_tokens": sum(len(g.prompt_ids) for g in gens.values()),
        "cached_tokens": cached,
        "request_tokens": [[len(g.prompt_ids), len(g.ids), g.stats["cached_tokens"]] for g in gens.values()],
        "output_tokens_per_s": common.per_second(out_tokens, end - t0),
        "decode_tokens_per_s": common.per_second(sum(n for _, n in pure), sum(d for d, _ in pure)),
        "steps": len(steps),
        "decode_only_steps": len(pure),
        "mean_running": sum(r for *_, r, _ in steps) / len(steps) if steps else 0.0,
        "peak_running": max((r for *_, r, _ in steps), default=0),
        "peak_blocks_used": max((u for *_, u in steps), default=0),
        "blocks_per_running_request": sum(per_request) / len(per_request) if per_request else 0.0,
        "ttft_s": common.summary(ttft),
        "itl_s": common.summary(itl),
    }


def _left_pad(batch: list[Work], pad: int):
    import torch

    width = max(len(w.ids) for w in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, w in enumerate(batch):
        ids[i, width - len(w.ids) :] = torch.tensor(w.ids)
        mask[i, width - len(w.ids) :] = 1
    return ids, mask


def drive_reference(ref, work: list[Work], batch_size: int, pad: int) -> dict:
    """HF static batching: batches in order, each left-padded and run to its longest output; every request
    arrives at the start, so a later batch's wait is part of its time to first token."""
    import torch

    ttft, itl, useful, generated, pure_tokens, pure_s = [], [], 0, 0, 0, 0.0
    t0 = time.perf_counter()
    for i in range(0, len(work), batch_size):
        batch = work[i : i + batch_size]
        ids, mask = _left_pad(batch, pad)
        n = max(w.max_tokens for w in batch)
        stamps = common.TokenStamps()
        with torch.inference_mode():
            ref.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                pad_token_id=pad,
                streamer=stamps,
            )
        for w in batch:  # a request's tokens are the first max_tokens steps of its row
            mine = stamps.times[: w.max_tokens]
            ttft.append(mine[0] - t0)
            itl += [b - a for a, b in zip(mine, mine[1:])]
        useful += sum(w.max_tokens for w in batch)
        generated += len(batch) * n
        pure_tokens += len(batch) * (len(stamps.times) - 1)
        pure_s += stamps.times[-1] - stamps.times[0]
    wall = time.perf_counter() - t0
    return {
        "requests": len(work),
        "batch_size": batch_size,
        "wall_s": wall,
        "load_1min": common.load_now(),
        "output_tokens": useful,
        "generated_tokens": generated,
        "output_tokens_per_s": common.per_second(useful, wall),
        "generated_tokens_per_s": common.per_second(generated, wall),
        "decode_tokens_per_s": common.per_second(pure_tokens, pure_s),
        "ttft_s": common.summary(ttft),
        "itl_s": common.summary(itl),
    }
