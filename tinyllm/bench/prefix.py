"""Prefix sharing: requests that share a long system prompt, run with the engine's prefix cache on and off
— KV blocks held per running request and at the peak, time to first token and time until every prefill is
done, cached tokens — and the same prompts sent again one at a time once each finished (a regenerated answer):
their time to first token and cached tokens, with the cache on and off.

The peak alone misleads: with sharing, a request's prompt is mostly cached, so the token budget admits every
request at once and the peak holds all of them; without, each prompt is computed in full, requests are
admitted a few at a time and early ones finish before late ones start, so fewer run together. The figure
shows blocks held and requests running step by step, and the blocks per running request.

Writes prefix.json and prefix.png."""

from __future__ import annotations

import gc
import random

from ..cli_flags import POSITIVE
from . import common, figure
from .workload import Work, drive_engine

# A small token budget, so later requests are admitted after the shared blocks are computed (a request
# admitted in the same step as the first cannot reuse blocks that do not exist yet).
QUICK = dict(
    requests=4,
    system_tokens=48,
    suffix_range=[4, 12],
    output_tokens=3,
    max_batched_tokens=32,
    kv_memory_mb=16,
    repeats=1,
)


RUN_CACHING = [("sharing", True), ("no_sharing", False)]
REPEATED = 8  # prompts sent again, one at a time


def add_args(p) -> None:
    p.add_argument("--requests", type=POSITIVE, default=32, help="requests sharing the system prompt (default 32)")
    p.add_argument("--system-tokens", type=POSITIVE, default=512, help="shared system prompt length (default 512)")
    p.add_argument(
        "--suffix-range", type=POSITIVE, nargs=2, default=[16, 48], help="each request's own tokens, min max"
    )
    p.add_argument("--output-tokens", type=POSITIVE, default=16, help="greedy tokens per request (default 16)")
    p.add_argument("--max-batched-tokens", type=POSITIVE, default=256, help="engine token budget per step")
    p.add_argument("--block-size", type=POSITIVE, default=16)
    p.add_argument("--kv-memory-mb", type=POSITIVE, default=1024, help="engine KV pool size (default 1024 MiB)")
    p.add_argument("--repeats", type=POSITIVE, default=2, help="runs of each setting, alternating; the fastest counts")


def shared_workload(tokenizer, args) -> list[Work]:
    ids = common.corpus_ids(tokenizer)
    rng = random.Random(args.seed)
    lengths = [rng.randint(*args.suffix_range) for _ in range(args.requests)]
    system = common.windows(ids, [args.system_tokens], args.seed)[0]
    suffixes = common.windows(ids, lengths, args.seed + 1)
    return [Work(system + s, args.output_tokens) for s in suffixes]


def make_engine(llm, args, caching: bool, max_num_seqs: int):
    from ..engine.engine import Engine

    gc.collect()  # the previous run's pool goes before the next is allocated
    return Engine(
        llm.parts,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=args.max_batched_tokens,
        block_size=args.block_size,
        kv_memory_bytes=args.kv_memory_mb << 20,
        enable_prefix_caching=caching,
    )


def one_run(llm, args, work: list[Work], caching: bool) -> dict:
    engine = make_engine(llm, args, caching, max_num_seqs=len(work))
    r = drive_engine(engine, work, keep_ids=True, keep_timeline=True)
    r["all_prefilled_s"] = r["ttft_s"]["max"]  # every request arrives at once: the last first token
    r["pool_blocks"] = engine.pool_stats().total
    return r


def repeated(llm, args, work: list[Work], caching: bool) -> dict:
    """Each prompt run once, then sent again alone: the second's time to first token and cached tokens."""
    engine = make_engine(llm, args, caching, max_num_seqs=1)
    ttft, cached = [], 0
    for w in work:
        drive_engine(engine, [w])
        again = drive_engine(engine, [Work(w.ids, 1)])
        ttft.append(again["ttft_s"]["p50"])
        cached += again["cached_tokens"]
    return {"requests": len(work), "ttft_s": common.summary(ttft), "cached_tokens": cached}


def measure(models: common.Models, args) -> dict:
    llm = models.llm
    work = shared_workload(llm.tokenizer, args)
    one_run(llm, args, work[:2], True)  # first-call set-up
    runs = {}
    for r in range(args.repeats):  # alternate, so that a busy spell on the machine does not hit one only
        for name, caching in RUN_CACHING[:: 1 if r % 2 == 0 else -1]:
            run = one_run(llm, args, work, caching)
            if name not in runs or run["wall_s"] < runs[name]["wall_s"]:
                runs[name] = run
    again = {name: repeated(llm, args, work[:REPEATED], caching) for name, caching in RUN_CACHING}
    same = runs["sharing"].pop("ids") == runs["no_sharing"].pop("ids")
    on, off = runs["sharing"], runs["no_sharing"]
    from ..cache.block_table import blocks_for

    blocks_alone = sum(blocks_for(len(w.ids) + w.max_tokens, args.block_size) for w in work)
    return {
        "requests": len(work),
        "system_tokens": args.system_tokens,
        "prompt_tokens": on["prompt_tokens"],
        "blocks_without_sharing_in_theory": blocks_alone,
        **runs,
        "same_ids": same,
        "blocks_per_request_saved": 1
        - common.ratio(on["blocks_per_running_request"], off["blocks_per_running_request"]),
        "all_prefilled_speedup": common.ratio(off["all_prefilled_s"], on["all_prefilled_s"]),
        "ttft_p50_speedup": common.ratio(off["ttft_s"]["p50"], on["ttft_s"]["p50"]),
        "wall_speedup": common.ratio(off["wall_s"], on["wall_s"]),
        "repeated": again,
        "repeated_ttft_p50_speedup": common.ratio(
            again["no_sharing"]["ttft_s"]["p50"], again["sharing"]["ttft_s"]["p50"]
        ),
    }


RUNS = {"sharing": "prefix sharing", "no_sharing": "no sharing"}


def draw(result: dict):
    def plot(fig):
        held_ax, per_ax, time_ax = fig.subplots(1, 3, gridspec_kw={"width_ratios": [2.2, 1, 1.4]})
        for i, (key, label) in enumerate(RUNS.items()):
            run = result[key]
            ts = [0.0] + [t for t, _, _ in run["timeline"]]
            held = [0] + [u for _, _, u in run["timeline"]]
            held_ax.step(ts, held, where="post", label=label, color=f"C{i}", **figure.style(i) | {"marker": None})
            peak = max(range(len(held)), key=held.__getitem__)
            running = run["timeline"][peak - 1][1] if peak else 0
            on_right = ts[peak] > 0.5 * max(result[k]["wall_s"] for k in RUNS)
            held_ax.annotate(
                f"peak: {held[peak]} blocks, {running} requests running",
                (ts[peak], held[peak]),
                xytext=(-10 if on_right else 10, 45 - 20 * i),  # above both lines, apart from each other
                textcoords="offset points",
                ha="right" if on_right else "left",
                fontsize=7,
                color=f"C{i}",
                arrowprops={"arrowstyle": "-", "color": f"C{i}", "lw": 0.6},
            )
        alone = result["blocks_without_sharing_in_theory"]
        held_ax.axhline(alone, color="0.5", lw=0.8, ls=":")
        held_ax.annotate(
            f"all {result['requests']} at once without sharing: {alone}",
            (0, alone),
            xytext=(4, 2),
            textcoords="offset points",
            fontsize=7,
        )
        held_ax.set(xlabel="seconds", ylabel="KV blocks held", ylim=(0, alone * 1.12), xlim=(0, None))
        held_ax.set_title(f"{result['requests']} requests, {result['system_tokens']}-token shared prefix", fontsize=10)
        held_ax.legend(fontsize=7, loc="center right")
        figure.grouped_bars(per_ax, list(RUNS.values()), {"": [result[k]["blocks_per_running_request"] for k in RUNS]})
        per_ax.set(ylabel="KV blocks", title=f"per running request ({result['blocks_per_request_saved']:.0%} fewer)")
        metrics = {"ttft p50": ("ttft_s", "p50"), "all prefilled": ("all_prefilled_s", None), "end": ("wall_s", None)}
        series = {RUNS[k]: [result[k][a] if b is None else result[k][a][b] for a, b in metrics.values()] for k in RUNS}
        figure.grouped_bars(time_ax, list(metrics), series, "{:.2f}")
        time_ax.set(ylabel="seconds", title=f"time (all prefilled {result['all_prefilled_speedup']:.1f}x sooner)")

    return plot


def report(result: dict) -> str:
    lines = [
        f"{'run':12s} {'peak blocks':>11s} {'running':>7s} {'blocks/req':>10s} {'cached tok':>10s} {'ttft p50':>9s} "
        f"{'all prefilled s':>15s} {'wall s':>8s}"
    ]
    for name in ("sharing", "no_sharing"):
        r = result[name]
        lines.append(
            f"{name:12s} {r['peak_blocks_used']:11d} {r['peak_running']:7d} {r['blocks_per_running_request']:10.1f} "
            f"{r['cached_tokens']:10d} {r['ttft_s']['p50']:9.2f} {r['all_prefilled_s']:15.2f} "
            f"{r['wall_s']:8.2f}"
        )
    lines.append(
        f"blocks per request saved {result['blocks_per_request_saved']:.1%}, all-prefilled speed-up "
        f"{result['all_prefilled_speedup']:.2f}x, same ids: {result['same_ids']}"
    )
    for name in ("sharing", "no_sharing"):
        r = result["repeated"][name]
        lines.append(
            f"{name:12s} the same prompt again ({r['requests']}, one at a time): ttft p50 "
            f"{1e3 * r['ttft_s']['p50']:.1f} ms, max {1e3 * r['ttft_s']['max']:.1f} ms, cached {r['cached_tokens']}"
        )
    lines.append(f"repeated-prompt ttft p50 speed-up {result['repeated_ttft_p50_speedup']:.2f}x")
    return "\n".join(lines)


def run(args, models: common.Models | None = None) -> dict:
    models = models or common.load_models(args, want_reference=False)
    result = common.header("prefix", args, models)
    result.update(measure(models, args))
    return common.save(args.out, "prefix", result, draw(result), report)
