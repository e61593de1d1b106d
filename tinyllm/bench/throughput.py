"""N concurrent requests of mixed prompt and output lengths through the engine (aggregate output tokens/s,
time to first token and inter-token latency p50/p99), a Poisson-arrival run at a few rates, HF
transformers' static-batch generate on the same weights and prompts, and llama.cpp running the same requests
at once (a GGUF model, llama-cpp-python installed); beside each run, its float32 floor (bound.py): the most
output tokens/s any float32 engine could give on these cores.

Each engine's KV pool is written through once before its run (unless --cold-pool), as a serving engine's pool
is after its first requests: the pool is mapped lazily, and a first write to each page costs the kernel (and on
a virtual machine the host) a fault (docs/benchmarks.md gives its measured share of a run). llama.cpp and vLLM
clear or allocate their caches whole at start-up.

Writes throughput.json and throughput.png."""

from __future__ import annotations

import gc

from ..cli_flags import KV_DTYPE_NAMES, POSITIVE
from ..errors import TinyLLMError
from . import bound, common, figure, llamacpp, llamacpp_batch
from .workload import drive_engine, drive_reference, make_workload, poisson

QUICK = dict(
    concurrency=[1, 3],
    prompt_range=[8, 24],
    output_range=[3, 6],
    rates=[8.0],
    poisson_requests=3,
    hf_batch=[2],
    hf_requests=3,
    llamacpp=[3],
    kv_memory_mb=16,
)
AIM_TOKENS_PER_S = 300.0  # aggregate output tokens/s of 32 concurrent requests


def add_args(p) -> None:
    p.add_argument(
        "--concurrency",
        type=POSITIVE,
        nargs="+",
        default=[1, 4, 16, 32, 64],
        help="numbers of requests run together (default 1 4 16 32 64)",
    )
    p.add_argument("--prompt-range", type=POSITIVE, nargs=2, default=[16, 256], help="prompt tokens, min max")
    p.add_argument("--output-range", type=POSITIVE, nargs=2, default=[32, 128], help="output tokens, min max")
    p.add_argument(
        "--rates",
        type=float,
        nargs="*",
        default=[0.5, 1.0, 2.0],
        help="Poisson arrival rates in requests/s (default 0.5 1 2; none to skip)",
    )
    p.add_argument("--poisson-requests", type=POSITIVE, default=32, help="requests per Poisson run (default 32)")
    p.add_argument(
        "--hf-batch",
        type=POSITIVE,
        nargs="*",
        default=[8, 32],
        help="HF static batch sizes (default 8 32; none to skip)",
    )
    p.add_argument("--hf-requests", type=POSITIVE, default=32, help="requests HF runs, the first of the workload")
    p.add_argument(
        "--llamacpp",
        type=int,  # 1 to the token budget, named by check_args before anything loads
        nargs="*",
        default=[32],
        help="numbers of requests llama.cpp runs at once, the first of the workload (default 32; none to skip)",
    )
    p.add_argument("--max-batched-tokens", type=POSITIVE, default=256, help="engine token budget per step")
    p.add_argument("--kv-memory-mb", type=POSITIVE, default=1024, help="engine KV pool size (default 1024 MiB)")
    p.add_argument(
        "--cold-pool",
        action="store_true",
        help="time each run on a fresh, lazily mapped KV pool (default: its pages written once before)",
    )
    p.add_argument(
        "--kv-dtype",
        choices=KV_DTYPE_NAMES,
        help="engine KV cache element type (default: the compute dtype)",
    )


def engine_for(llm, args, max_num_seqs: int):
    from ..engine.engine import Engine

    gc.collect()  # the previous run's pool goes before the next is allocated
    engine = Engine(
        llm.parts,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=args.max_batched_tokens,
        kv_memory_bytes=args.kv_memory_mb << 20,
        kv_dtype=args.kv_dtype,
    )
    if not args.cold_pool:
        engine.storage.prefault()
    return engine


def measure(models: common.Models, args) -> dict:
    from ..config import kv_dtype_name

    llm = models.llm
    largest = max(args.concurrency + (args.llamacpp or []) + [args.poisson_requests, args.hf_requests])
    work = make_workload(llm.tokenizer, largest, args.prompt_range, args.output_range, args.seed)
    drive_engine(engine_for(llm, args, 2), work[:2])  # first-call set-up
    closed = []
    for n in args.concurrency:
        engine = engine_for(llm, args, n)
        pool = {"kv_dtype": kv_dtype_name(engine.storage.dtype), "kv_pool_prefaulted": not args.cold_pool}
        closed.append({"concurrency": n, **pool, **drive_engine(engine, work[:n])})
        del engine
        _progress("engine", closed[-1])
    arrivals = []
    for rate in args.rates:
        timed = poisson(work[: args.poisson_requests], rate, args.seed + 1)
        arrivals.append(
            {
                "rate": rate,
                "max_num_seqs": args.poisson_requests,
                **drive_engine(engine_for(llm, args, args.poisson_requests), timed),
            }
        )
        _progress(f"poisson {rate}/s", arrivals[-1])
    peers = []
    if args.llamacpp and llamacpp.peer_usable(models.path):
        for n in args.llamacpp:
            run = llamacpp_batch.drive(models.path, work[:n], common.torch_threads(), args.max_batched_tokens)
            peers.append({"concurrency": n, **run})
            _progress("llama.cpp", peers[-1])
    ref = []
    if models.reference is not None:
        for b in args.hf_batch:
            ref.append(drive_reference(models.reference, work[: args.hf_requests], b, common.pad_id(llm)))
            _progress(f"HF batch {b}", ref[-1])
    return {
        "closed": closed,
        "poisson": arrivals,
        "reference_static": ref,
        "llamacpp_batched": peers,
    }


def _progress(what: str, r: dict) -> None:
    print(
        f"  {what}: {r['requests']} requests, {r['output_tokens_per_s']:.1f} output tok/s, {r['wall_s']:.1f} s",
        flush=True,
    )


def compare(closed: list[dict], ref: list[dict], peers: list[dict]) -> dict:
    """Ours at 32 requests against the aim; ours at the concurrency equal to the number of requests HF ran,
    over each HF batch size; ours over llama.cpp at each concurrency both ran."""
    out = {"aim_output_tokens_per_s_at_32": AIM_TOKENS_PER_S}
    at32 = next((c for c in closed if c["concurrency"] == 32), None)
    if at32:
        out["output_tokens_per_s_at_32"] = at32["output_tokens_per_s"]
        out["decode_tokens_per_s_at_32"] = at32["decode_tokens_per_s"]
        out["aim_reached"] = at32["output_tokens_per_s"] >= AIM_TOKENS_PER_S
        out["aim_reached_in_decode_steps"] = at32["decode_tokens_per_s"] >= AIM_TOKENS_PER_S
        floor = at32.get("float32_floor")
        if floor:
            out["most_output_tokens_per_s_at_32"] = floor["most_output_tokens_per_s"]
            # the share of the cores' FMA rate the aim needs: the floor's time over the aim's wall time
            out["aim_needs_share_of_fma_rate"] = floor["float32_floor_s"] * AIM_TOKENS_PER_S / at32["output_tokens"]
    for p in peers:
        same = next((c for c in closed if c["concurrency"] == p["concurrency"]), None)
        if same:
            for key in ("output_tokens_per_s", "decode_tokens_per_s"):
                out[f"{key}_over_llamacpp_at_{p['concurrency']}"] = common.ratio(same[key], p[key])
    for r in ref:
        same = next((c for c in closed if c["concurrency"] == r["requests"]), None)
        if same:
            out[f"output_tokens_per_s_over_hf_batch_{r['batch_size']}"] = common.ratio(
                same["output_tokens_per_s"], r["output_tokens_per_s"]
            )
            out[f"decode_tokens_per_s_over_hf_batch_{r['batch_size']}"] = common.ratio(
                same["decode_tokens_per_s"], r["decode_tokens_per_s"]
            )
    return out


def draw(result: dict):
    def plot(fig):
        rate_ax, lat_ax, poi_ax = fig.subplots(1, 3)
        xs = [c["concurrency"] for c in result["closed"]]
        _rate_panel(rate_ax, result, xs)
        _latency_lines(lat_ax, xs, result["closed"])
        lat_ax.set(xlabel="concurrent requests", ylabel="seconds", title="latency", xscale="log", yscale="log")
        rates = [p["rate"] for p in result["poisson"]]
        _latency_lines(poi_ax, rates, result["poisson"])  # the latency panel's order: each series keeps its look
        poi_ax.set(xlabel="arrival rate (requests/s)", ylabel="seconds", title="Poisson arrivals", yscale="log")
        if not rates:
            poi_ax.text(0.5, 0.5, "not run (--rates with no rate)", ha="center", transform=poi_ax.transAxes)
        for ax in (rate_ax, lat_ax):
            ax.set_xticks(xs, [str(x) for x in xs])  # plain numbers on the log axis
            ax.minorticks_off()
        for ax in (rate_ax, lat_ax, poi_ax):
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)

    return plot


def _rate_panel(ax, result: dict, xs: list) -> None:
    """Our output and decode rates by concurrency, the peers' as points."""
    out_label = "tinyllm, output (prefill included)"
    ax.plot(xs, [c["output_tokens_per_s"] for c in result["closed"]], label=out_label, **figure.style(0))
    ax.plot(xs, [c["decode_tokens_per_s"] for c in result["closed"]], label="tinyllm, decode steps", **figure.style(1))
    for r in result["reference_static"]:
        ax.scatter(
            [r["batch_size"]], [r["output_tokens_per_s"]], marker="x", s=60, label=f"HF static batch {r['batch_size']}"
        )
    for p in result["llamacpp_batched"]:
        ax.scatter([p["concurrency"]], [p["output_tokens_per_s"]], marker="^", s=60, label="llama.cpp, output")
    ax.set(xlabel="concurrent requests", ylabel="tokens/s", title="aggregate throughput", xscale="log")
    ax.set_ylim(bottom=0)


def _latency_lines(ax, xs: list, runs: list[dict]) -> None:
    """Time to first token and between tokens, median and p99, one line each over `xs`."""
    series = [(key, q) for key in ("ttft_s", "itl_s") for q in ("p50", "p99")]
    for i, (key, q) in enumerate(series):
        ax.plot(xs, [run[key][q] for run in runs], label=f"{key[:-2]} {q}", **figure.style(i))


def report(result: dict) -> str:
    def row(name, r):
        return (
            f"{name:22s} {r['requests']:4d} {r['output_tokens_per_s']:9.1f} {r['decode_tokens_per_s']:9.1f} "
            f"{r['ttft_s']['p50']:7.2f} {r['ttft_s']['p99']:7.2f} {r['itl_s']['p50']:7.3f} "
            f"{r['itl_s']['p99']:7.3f}"
        )

    lines = [
        f"{'run':22s} {'reqs':>4s} {'out tok/s':>9s} {'dec tok/s':>9s} {'ttft50':>7s} {'ttft99':>7s} "
        f"{'itl50':>7s} {'itl99':>7s}"
    ]
    lines += [row(f"engine N={c['concurrency']}", c) for c in result["closed"]]
    lines += [row(f"engine poisson {p['rate']:g}/s", p) for p in result["poisson"]]
    lines += [row(f"HF static batch {r['batch_size']}", r) for r in result["reference_static"]]
    lines += [row(f"llama.cpp N={p['concurrency']}", p) for p in result["llamacpp_batched"]]
    lines += [f"{k}: {v:.2f}" if isinstance(v, float) else f"{k}: {v}" for k, v in result["comparison"].items()]
    bits = result.get("activation_bits", 32)
    lines += [floor_line(c, bits) for c in result["closed"] if c.get("float32_floor")]
    return "\n".join(lines)


def floor_line(c: dict, bits: int = 32) -> str:
    f = c["float32_floor"]
    return (
        f"float32 floor, N={c['concurrency']}: {f['float32_gmacs']:.1f} G multiply-adds, {f['float32_floor_s']:.2f} s "
        f"at the cores' {f['fma_gmacs_per_s']:.1f} G/s: at most {f['most_output_tokens_per_s']:.1f} output tok/s; "
        f"this run {c['output_tokens_per_s']:.1f}, {100 * f['share_of_floor']:.0f}% of that"
        + (f" ({bits}-bit activations: integer dot products, not bound by it)" if bits != 32 else "")
    )


def check_args(args) -> None:
    """Counts the runs cannot meet, named before anything loads."""
    for n in args.llamacpp or []:
        if not 1 <= n <= args.max_batched_tokens:
            raise TinyLLMError(
                f"--llamacpp {n}: llama.cpp's requests run at once, so each count must be 1 to the token budget "
                f"(--max-batched-tokens {args.max_batched_tokens})"
            )


def add_floors(result: dict, model) -> None:
    """Each closed run's float32 floor (bound.py) at the higher of the FMA rates measured before the runs and
    now, so the floor is the least time at the best rate the cores gave; then the comparison."""
    n = common.torch_threads()
    before = (result.get("machine") or {}).get("compute_before", {}).get(f"fma_gmacs_{n}_threads")
    rates = [r for r in (before, common.fma_rate(n)) if r]
    for c in result["closed"]:
        floor = bound.floor(model, c["request_tokens"], max(rates, default=None))
        if floor:
            floor["most_output_tokens_per_s"] = common.per_second(c["output_tokens"], floor["float32_floor_s"])
            floor["share_of_floor"] = floor["float32_floor_s"] / c["wall_s"]  # of the cores' rate, this run
        c["float32_floor"] = floor
    result["comparison"] = compare(result["closed"], result["reference_static"], result["llamacpp_batched"])


def run(args, models: common.Models | None = None) -> dict:
    check_args(args)
    models = models or common.load_models(args)
    result = common.header("throughput", args, models)
    result.update(measure(models, args))
    add_floors(result, models.llm.model)
    result["peers"] = {
        "HF transformers": bool(result["reference_static"]),
        "llama.cpp": bool(result["llamacpp_batched"]),
    }
    return common.save(args.out, "throughput", result, draw(result), report)
