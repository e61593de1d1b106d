"""Tensor-parallel decode (`tinyllm bench decode --tensor-parallel-size 1 2 ...`): greedy tokens/s of the engine
split over N processes, the all-reduce time the driver spends per token, and, on paper, what the all-reduces
would cost on 2-8 GPUs.

On paper: each layer ends its attention and its MLP with one all-reduce of the new rows' hidden states, so a
decode token of batch 1 costs 2·L all-reduces of C·itemsize bytes. A ring all-reduce moves 2(N-1)/N of those
bytes in and out of every rank and pays about 2(N-1) link latencies; the smaller the message, the more the
latency dominates. The link figures below are round published numbers, the latency an assumed order of
magnitude for a small NCCL all-reduce, not measurements.

Writes decode-tp.json and decode-tp.png."""

from __future__ import annotations

import time

from . import common, figure

LINKS = {  # name: (bytes/s one way, seconds per hop)
    "NVLink (H100/H200, 450 GB/s)": (450e9, 2e-6),
    "PCIe 5 x16 (64 GB/s)": (64e9, 5e-6),
    "PCIe 4 x16 (32 GB/s)": (32e9, 5e-6),
}
PAPER_SIZES = (2, 4, 8)


def run(args) -> dict:
    from ..distributed.config import ParallelConfig
    from ..llm import LLM

    path = common.model_path(args.model)
    common.warm_file_cache(path)
    options = {k: v for k, v in vars(args).items() if k not in ("func", "bench_run")}
    result = {"bench": "decode-tensor-parallel", "model": path, "machine": common.machine_info(), "options": options}
    result["rows"] = []
    expected = None
    for size in args.tensor_parallel_size:
        llm = LLM(path, dtype=args.dtype, weights=args.weights, quantize=args.quantize, parallel=ParallelConfig(size))
        try:
            ids = common.windows(common.corpus_ids(llm.tokenizer), [args.prompt_tokens], args.seed)[0]
            rows = measure(llm, size, ids, args.new_tokens, args.repeats)
        finally:
            llm.close()
        expected = expected or {r["new_tokens"]: r["ids"] for r in rows}
        for r in rows:
            r["same_ids_as_first_size"] = r.pop("ids") == expected[r["new_tokens"]]
        result["rows"] += rows
        result["config"] = {k: getattr(llm.config, k) for k in ("num_layers", "hidden_size", "num_heads")}
    result["on_paper"] = on_paper(result["config"]["num_layers"], result["config"]["hidden_size"])
    return common.save(args.out, "decode-tp", result, draw(result), report)


def measure(llm, size: int, ids: list[int], new_tokens: list[int], repeats: int) -> list[dict]:
    """The fastest of `repeats` greedy runs per length, with the driver's all-reduce count and time."""
    stats = llm.tensor_parallel.stats if llm.tensor_parallel else None
    llm.generate(ids, max_tokens=2, temperature=0, ignore_eos=True)  # first-call set-up
    rows = []
    for n in new_tokens:
        best = None
        for _ in range(repeats):
            if stats:
                stats.reset()
            start = time.perf_counter()
            g = llm.generate(ids, max_tokens=n, temperature=0, ignore_eos=True)
            wall = time.perf_counter() - start
            if best is None or wall < best["wall_s"]:
                best = {
                    "tensor_parallel_size": size,
                    "new_tokens": n,
                    "wall_s": wall,
                    "decode_tokens_per_s": g.stats["decode_tokens_per_s"],
                    "all_reduces_per_token": stats.count / n if stats else 0.0,
                    "all_reduce_ms_per_token": 1e3 * stats.seconds / n if stats else 0.0,
                    "load_1min": common.load_now(),
                    "ids": g.ids,
                }
        rows.append(best)
    return rows


def on_paper(num_layers: int, hidden_size: int, itemsize: int = 2) -> list[dict]:
    """Per decode token at batch 1 (bf16 activations): bytes all-reduced, and the time on each link."""
    message = hidden_size * itemsize
    out = []
    for n in PAPER_SIZES:
        per_token = 2 * num_layers
        moved = 2 * (n - 1) / n * message * per_token  # bytes in (and out) of each rank per token
        row = {"ranks": n, "all_reduces_per_token": per_token, "bytes_per_all_reduce": message}
        row["bytes_per_rank_per_token"] = moved
        for link, (bandwidth, hop) in LINKS.items():
            row[link] = 1e3 * (moved / bandwidth + per_token * 2 * (n - 1) * hop)  # ms per token
        out.append(row)
    return out


def draw(result: dict):
    def plot(fig):
        rate_ax, reduce_ax = fig.subplots(1, 2)
        sizes = sorted({r["tensor_parallel_size"] for r in result["rows"]})
        for i, n in enumerate(sorted({r["new_tokens"] for r in result["rows"]})):
            rows = sorted((r for r in result["rows"] if r["new_tokens"] == n), key=lambda r: r["tensor_parallel_size"])
            xs = [r["tensor_parallel_size"] for r in rows]
            label = f"{n} new tokens"
            rate_ax.plot(xs, [r["decode_tokens_per_s"] for r in rows], label=label, **figure.style(i))
            reduce_ax.plot(xs, [r["all_reduce_ms_per_token"] for r in rows], label=label, **figure.style(i))
        rate_ax.set(xlabel="processes", ylabel="decode tokens/s", title="greedy decode, batch 1", ylim=(0, None))
        reduce_ax.set(xlabel="processes", ylabel="ms per token", title="the driver's all-reduce time", ylim=(0, None))
        for ax in (rate_ax, reduce_ax):
            ax.set_xticks(sizes, [str(n) for n in sizes])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)

    return plot


def report(result: dict) -> str:
    lines = [f"{'TP':>3s} {'new':>5s} {'decode tok/s':>13s} {'all-reduces/tok':>16s} {'all-reduce ms/tok':>18s} same"]
    for r in result["rows"]:
        lines.append(
            f"{r['tensor_parallel_size']:3d} {r['new_tokens']:5d} {r['decode_tokens_per_s']:13.2f} "
            f"{r['all_reduces_per_token']:16.1f} {r['all_reduce_ms_per_token']:18.3f} {r['same_ids_as_first_size']}"
        )
    lines.append("on paper, batch 1, bf16 (ms of all-reduce per token):")
    for row in result["on_paper"]:
        links = "  ".join(f"{link.split(' (')[0]} {row[link]:.3f}" for link in LINKS)
        lines.append(
            f"  {row['ranks']} GPUs: {row['all_reduces_per_token']} x {row['bytes_per_all_reduce']} B, "
            f"{row['bytes_per_rank_per_token'] / 1e3:.1f} kB per rank; {links}"
        )
    return "\n".join(lines)
