"""Where a batch-1 decode token's time goes, on two paths. The module path (the model's forward over a
contiguous cache, what the engine runs for models the native step does not cover): matmuls, attention and
everything else, with the number of eager calls (top-level operators) per token, from torch.profiler over a
run of cached decode steps. The engine's path (LLM.generate): the native decode step's own clock per phase,
the head, the runner's and the engine's Python (bench/step_engine.py); and a speculative verification's
forward at K rows (`--verify-rows`) against a decode step's.

The wall time per token is measured without the profiler; the split comes from the profiler's own times,
scaled to that wall time (the profiler slows every call a little, the small ones most).

Writes step.json and step.png."""

from __future__ import annotations

import contextlib
import time

from ..cli_flags import POSITIVE
from . import common, figure
from .step_engine import engine_breakdown, verification_ms

QUICK = dict(prompt_tokens=16, steps=4)
# Operator names (profiler events) counted as each part; everything else is "other".
MATMUL_OPS = ("aten::linear", "aten::mm", "aten::addmm", "aten::matmul", "aten::bmm", "tinyllm::")
ATTENTION_OPS = ("aten::scaled_dot_product_attention",)


def add_args(p) -> None:
    p.add_argument("--prompt-tokens", type=POSITIVE, default=32, help="prompt length before the measured steps")
    p.add_argument("--steps", type=POSITIVE, default=64, help="decode steps measured (default 64)")
    p.add_argument(
        "--verify-rows",
        type=POSITIVE,
        nargs="*",
        default=[5, 9],
        metavar="K",
        help="also time the engine's forward verifying K - 1 drafts (K rows) against a decode step (default 5 9)",
    )


def _part(name: str) -> str:
    if name.startswith(MATMUL_OPS):
        return "matmul"
    if name.startswith(ATTENTION_OPS):
        return "attention"
    return "other"


def _decode_steps(model, ids: list[int], steps: int):
    """A prefilled cache and a function running one greedy decode step on it."""
    import torch

    from ..cache.kv_cache import KVCache
    from ..kernels import torch_single_threaded
    from ..model.quant_linear import runs_native
    from ..model.step import LAST, CacheStep

    c = model.config
    cache = KVCache(c.num_layers, c.num_kv_heads, c.head_dim, len(ids) + 2 * steps + 4)
    with torch.inference_mode():
        logits = model(torch.tensor([ids]), CacheStep(cache, len(ids), LAST))  # [1, 1, V]
    state = {"next": logits[0, -1].argmax().view(1, 1)}

    # as the engine's runner does for a decode step on native kernels: torch's own ops on one thread
    threads = torch_single_threaded if runs_native(model) else contextlib.nullcontext

    def step():
        with torch.inference_mode(), threads():
            out = model(state["next"], CacheStep(cache, 1, LAST))  # [1, 1, V]
            state["next"] = out[0, -1].argmax().view(1, 1)

    return step


def _label_linears(model):
    """Forward hooks that wrap every linear layer's call in a profiler range named tinyllm::<layer>, so
    native matmuls (which the profiler cannot see inside) count as matmul time. Returns the hook handles."""
    from torch import nn
    from torch.autograd.profiler import record_function

    from ..model.quant_linear import QuantLinear

    handles = []
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, QuantLinear)):
            ranges = []
            handles.append(
                module.register_forward_pre_hook(
                    lambda m, a, r=ranges, n=name: r.append(record_function(f"tinyllm::{n}").__enter__())
                )
            )
            handles.append(module.register_forward_hook(lambda m, a, out, r=ranges: r.pop().__exit__(None, None, None)))
    return handles


def _is_call(ev) -> bool:
    """An eager call: an operator at the top level, or directly inside one of the linear ranges."""
    parent = ev.cpu_parent
    return ev.name.startswith("aten::") and (parent is None or parent.name.startswith("tinyllm::"))


def profile_steps(model, ids: list[int], steps: int) -> dict:
    """Per-token wall ms, and the profiler's ms and top-level call counts per part, per token."""
    from torch.profiler import ProfilerActivity, profile

    step = _decode_steps(model, ids, steps)
    for _ in range(3):
        step()  # first-call set-up
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    wall_ms = (time.perf_counter() - t0) * 1000 / steps
    step = _decode_steps(model, ids, steps)
    step()
    handles = _label_linears(model)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
    finally:
        for h in handles:
            h.remove()
    parts = {"matmul": 0.0, "attention": 0.0, "other": 0.0}
    calls = {"matmul": 0, "attention": 0, "other": 0}
    for ev in prof.events():
        if ev.cpu_parent is None:  # top-level ranges: their times include what they call
            parts[_part(ev.name)] += ev.cpu_time_total / 1000
        if _is_call(ev):
            top = ev if ev.cpu_parent is None else ev.cpu_parent
            calls[_part(top.name)] += 1
    profiled = sum(parts.values())
    scale = wall_ms * steps / profiled if profiled else 0.0
    return {
        "wall_ms_per_token": wall_ms,
        "tokens_per_s": 1000 / wall_ms,
        "ms_per_token": {k: v * scale / steps for k, v in parts.items()},
        "profiled_ms_per_token": profiled / steps,
        "calls_per_token": {k: v / steps for k, v in calls.items()},
        "eager_calls_per_token": sum(calls.values()) / steps,
    }


def report(result: dict) -> str:
    b = result["breakdown"]
    lines = [
        f"module path, batch 1, after a {result['prompt_tokens']}-token prompt: "
        f"{b['wall_ms_per_token']:.2f} ms/token ({b['tokens_per_s']:.1f} tok/s), "
        f"{b['eager_calls_per_token']:.0f} eager calls/token"
    ]
    for part, ms in b["ms_per_token"].items():
        lines.append(f"  {part:10s} {ms:7.2f} ms  {b['calls_per_token'][part]:6.0f} calls")
    e = result.get("engine") or {}
    if e.get("native_step"):
        ms, rate = e["wall_ms_per_token"], e["tokens_per_s"]
        lines.append(f"engine (native decode step), batch 1: {ms:.2f} ms/token ({rate:.1f} tok/s)")
        lines += [f"  {part:38s} {ms:6.2f} ms" for part, ms in e["ms_per_token"].items()]
    else:
        lines.append("engine: this model runs the module path (no native decode step)")
    v = result.get("verification") or {}
    if v.get("forward_ms"):
        parts = [
            f"{k} rows {ms:.2f} ms ({v['over_one_row'][k]:.2f}x)" if ms is not None else f"{k} rows n/a"
            for k, ms in v["forward_ms"].items()
            if k != "1"
        ]
        one = v["forward_ms"]["1"]
        lines.append(f"engine forward, median: 1 row (a decode step) {one:.2f} ms; verifying: " + ", ".join(parts))
    return "\n".join(lines)


def draw(result: dict):
    """One stacked bar per path: the parts of a token's time, each labelled with its ms where it fits."""
    paths = [("module path", result["breakdown"]["ms_per_token"])]
    if (result.get("engine") or {}).get("native_step"):
        paths.insert(0, ("engine (native step)", result["engine"]["ms_per_token"]))

    def plot(fig):
        ax = fig.add_subplot(1, 1, 1)
        longest = max(sum(parts.values()) for _, parts in paths) or 1.0
        colour = 0
        for row, (name, parts) in enumerate(paths):
            left = 0.0
            for part, ms in parts.items():
                hatch = figure.HATCHES[colour % len(figure.HATCHES)]
                ax.barh(row, ms, left=left, color=f"C{colour % 10}", hatch=hatch, label=f"{name}: {part}")
                if ms > 0.06 * longest:
                    ax.text(left + ms / 2, row, f"{ms:.2f}", ha="center", va="center", fontsize=7)
                left += ms
                colour += 1
            ax.text(left, row, f"  {left:.2f} ms", va="center", fontsize=8)
        ax.set_yticks(range(len(paths)), [name for name, _ in paths])
        ax.set(xlabel="ms per token", xlim=(0, longest * 1.15))
        ax.set_title(f"where a batch-1 decode token's time goes, after a {result['prompt_tokens']}-token prompt")
        ax.invert_yaxis()
        ax.grid(alpha=0.3, axis="x")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))

    return plot


def run(args, models: common.Models | None = None) -> dict:
    args.no_reference = True
    models = models or common.load_models(args, want_reference=False)
    result = common.header("step", args, models)
    ids = common.windows(common.corpus_ids(models.llm.tokenizer), [args.prompt_tokens], args.seed)[0]
    result.update(prompt_tokens=len(ids), steps=args.steps, breakdown=profile_steps(models.llm.model, ids, args.steps))
    result["engine"] = engine_breakdown(models.llm, ids, args.steps)
    if args.verify_rows:
        result["verification"] = verification_ms(models.llm, ids, args.steps, sorted(set(args.verify_rows)))
    return common.save(args.out, "step", result, draw(result), report)
