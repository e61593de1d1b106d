"""Quantized matmul kernels on a model's shapes (the default model's, or --model's): native qmatmul (float32
activations, 8-bit ones as weights="native-int8" runs it and 24-bit ones as "native-int24") vs float32 F.linear
vs dequantize +
F.linear, per M, with GB/s of weight bytes read, and one whole decode token's matmuls.

Weights are random blocks (timing does not depend on the values) with enough copies of each shape to exceed
the last-level cache, cycled through as a model's layers are, so M = 1 reads its weights from memory.

With --model, the shapes and formats are the file's matrices (a synthetic:SHAPE:FORMAT file gives a real model's
shapes); the whole-step runs in order are for the default model only.

Writes kernels.json and kernels.png (one decode step's matmuls per activation row, at each M)."""

from __future__ import annotations

import math
import time

from ..cli_flags import POSITIVE
from . import common, figure

QUICK = dict(m=[1, 8], min_time=0.01, cache_mb=2)
# (format, N, K, uses per decode token) of SmolLM2-135M: 30 layers of q, k, v, o, gate, up, down; tied head.
SHAPES = [
    ("Q4_1", 576, 576, 60),
    ("Q4_1", 192, 576, 60),
    ("Q4_1", 1536, 576, 60),
    ("Q4_1", 576, 1536, 30),
    ("Q8_0", 49152, 576, 1),
]


def model_shapes(path: str) -> list[tuple[str, int, int, int]]:
    """(format, N, K, uses per decode token) of a GGUF file's block-format matrices; a tied head (no
    output.weight) is the embedding's matrix used once more."""
    from ..kernels import FORMATS
    from ..loading.gguf_file import open_gguf

    g = open_gguf(path)
    uses: dict[tuple[str, int, int], int] = {}
    for name, t in g.tensors.items():
        fmt = t.tensor_type.name
        if fmt not in FORMATS or len(t.shape) != 2:
            continue
        if name == "token_embd.weight" and "output.weight" in g.tensors:
            continue  # an embedding looked up, not multiplied
        k, n = (int(d) for d in t.shape)  # ggml lists the fastest dim first
        uses[(fmt, n, k)] = uses.get((fmt, n, k), 0) + 1
    return [(fmt, n, k, u) for (fmt, n, k), u in uses.items()]


def add_args(p) -> None:
    p.add_argument(
        "--m", type=POSITIVE, nargs="+", default=[1, 8, 32, 512], help="activation rows (default 1 8 32 512)"
    )
    p.add_argument("--min-time", type=float, default=0.3, help="seconds of repeats per cell (default 0.3)")
    p.add_argument(
        "--cache-mb", type=POSITIVE, default=96, help="weight copies per shape total at least this (default 96)"
    )


def random_weight(fmt: str, n: int, k: int, seed: int):
    """Random blocks whose fp16 scale fields are finite and small."""
    import torch

    from ..kernels import FORMATS, QuantWeight
    from ..kernels.reference import SCALE_OFFSETS

    f = FORMATS[fmt]
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, 256, (n * k // f.block_size, f.type_size), dtype=torch.uint8, generator=g)
    for off in SCALE_OFFSETS[fmt]:
        scale = (torch.rand(data.shape[0], 1, generator=g) * 0.01).to(torch.float16)
        data[:, off : off + 2] = scale.view(torch.uint8)
    return QuantWeight(data.reshape(n, -1), fmt, (n, k))


def best_time(fn, args_list: list, min_time: float) -> float:
    """Seconds per call, the fastest of rounds that each cycle once through args_list."""
    fn(*args_list[0])
    best, spent = math.inf, 0.0
    while spent < min_time or best == math.inf:
        t0 = time.perf_counter()
        for args in args_list:
            fn(*args)
        dt = time.perf_counter() - t0
        spent += dt
        best = min(best, dt / len(args_list))
    return best


def measure_shape(fmt: str, n: int, k: int, ms: list[int], min_time: float, cache_mb: int) -> list[dict]:
    import torch
    import torch.nn.functional as F

    from ..kernels import FORMATS, QuantWeight, dequantize, qmatmul

    nbytes = n * k // FORMATS[fmt].block_size * FORMATS[fmt].type_size
    copies = max(1, math.ceil(cache_mb * 2**20 / nbytes))
    ws = [random_weight(fmt, n, k, i) for i in range(copies)]
    ws8 = [QuantWeight(w.data, fmt, (n, k), int8_activations=True) for w in ws]
    ws24 = [QuantWeight(w.data, fmt, (n, k), int8_activations=True, limbs=3) for w in ws]
    dense = [dequantize(w) for w in ws[: max(1, math.ceil(cache_mb * 2**20 / (n * k * 4)))]]
    rows = []
    for m in ms:
        x = torch.randn(m, k)
        with torch.inference_mode():
            t_q = best_time(qmatmul, [(x, w) for w in ws], min_time)
            for w in ws8 + ws24:  # packed for the 8-bit kernel at the first call, not in the timed rounds
                qmatmul(x[:1], w)
            t_8 = best_time(qmatmul, [(x, w) for w in ws8], min_time)
            t_24 = best_time(qmatmul, [(x, w) for w in ws24], min_time)
            t_f = best_time(F.linear, [(x, d) for d in dense], min_time)
            t_d = best_time(lambda x, w: F.linear(x, dequantize(w)), [(x, ws[0])], min_time / 3)
        rows.append(
            {
                "fmt": fmt,
                "n": n,
                "k": k,
                "m": m,
                "weight_bytes": nbytes,
                "native_s": t_q,
                "native_int8_s": t_8,
                "native_int24_s": t_24,
                "float32_linear_s": t_f,
                "dequantize_linear_s": t_d,
                "native_gb_s": nbytes / t_q / 1e9,
                "float32_gb_s": n * k * 4 / t_f / 1e9,
            }
        )
    return rows


def measured_token(m: int, min_time: float) -> dict:
    """One decode step's 211 matmuls run in order on distinct weights (as a model holds them), at this M:
    best and median seconds of native qmatmul and of float32 F.linear."""
    import torch
    import torch.nn.functional as F

    from ..kernels import dequantize, qmatmul

    weights = [random_weight(fmt, n, k, 100 + i) for i, (fmt, n, k, uses) in enumerate(SHAPES) for _ in range(uses)]
    xs = {k: torch.randn(m, k) for k in {w.shape[1] for w in weights}}
    out = {}
    with torch.inference_mode():
        for name, fn, ws in [("native", qmatmul, weights), ("float32", F.linear, None)]:
            if ws is None:  # float32 copies are made one at a time and dropped to bound memory
                ws = [dequantize(w) for w in weights]
            times = []
            while sum(times) < min_time * 5 or len(times) < 5:
                t0 = time.perf_counter()
                for w in ws:
                    fn(xs[w.shape[1]], w)
                times.append(time.perf_counter() - t0)
            out[name] = {"best_s": min(times), "median_s": sorted(times)[len(times) // 2]}
            ws = None
    return out


KERNEL_KEYS = ("native", "native_int8", "native_int24")  # float32, 8-bit and 24-bit activations


def token_time(rows: list[dict], m: int, key: str, shapes: list) -> float:
    """Seconds of one decode step's matmuls at this M: each shape's time times its uses per token."""
    uses = {(f, n, k): u for f, n, k, u in shapes}
    return sum(r[key] * uses[(r["fmt"], r["n"], r["k"])] for r in rows if r["m"] == m)


def report(result: dict) -> str:
    lines = [
        f"native kernels: {result['native']}  threads: {result['machine']['torch_threads']}",
        f"{'shape':>18s} {'M':>4s} {'native ms':>10s} {'int8 ms':>8s} {'int24 ms':>9s} {'f32 ms':>9s} "
        f"{'deq+f32 ms':>11s} "
        f"{'x f32':>6s} {'native GB/s':>11s} {'f32 GB/s':>9s}",
    ]
    for r in result["rows"]:
        shape = f"{r['fmt']} {r['n']}x{r['k']}"
        lines.append(
            f"{shape:>18s} {r['m']:4d} {r['native_s'] * 1e3:10.3f} {r['native_int8_s'] * 1e3:8.3f} "
            f"{r['native_int24_s'] * 1e3:9.3f} "
            f"{r['float32_linear_s'] * 1e3:9.3f} "
            f"{r['dequantize_linear_s'] * 1e3:11.3f} {r['float32_linear_s'] / r['native_s']:6.2f} "
            f"{r['native_gb_s']:11.1f} {r['float32_gb_s']:9.1f}"
        )
    count = sum(u for *_, u in result["shapes"])
    for m, t in result["token_ms"].items():
        lines.append(
            f"{count} matmuls of one step at M={m}, sum of the cells above: native {t['native']:.2f} ms, "
            f"8-bit activations {t['native_int8']:.2f} ms, 24-bit {t['native_int24']:.2f} ms, float32 F.linear "
            f"{t['float32']:.2f} ms"
        )
    for m, t in result["token_measured"].items():
        lines.append(
            f"211 matmuls of one step at M={m}, run in order: native best {t['native']['best_s'] * 1e3:.2f} "
            f"ms (median {t['native']['median_s'] * 1e3:.2f}), float32 best "
            f"{t['float32']['best_s'] * 1e3:.2f} ms (median {t['float32']['median_s'] * 1e3:.2f})"
        )
    return "\n".join(lines)


def draw(result: dict):
    ms = list(result["token_ms"])
    modes = {
        "native (float32 activations)": "native",
        "native, 8-bit activations": "native_int8",
        "native, 24-bit activations": "native_int24",
    }
    modes["float32 F.linear"] = "float32"

    def plot(fig):
        ax = fig.add_subplot(1, 1, 1)
        series = {name: [result["token_ms"][m][key] / m for m in ms] for name, key in modes.items()}
        figure.grouped_bars(ax, [f"M = {m}" for m in ms], series, "{:.3f}")
        ax.set(ylabel="ms per activation row", title=f"one decode step's matmuls ({result['shapes_of']}'s shapes)")

    return plot


def run(args) -> dict:
    from ..kernels import native_available

    options = {k: v for k, v in vars(args).items() if k not in ("func", "bench_run")}
    result = {
        "bench": "kernels",
        "machine": common.machine_info(),
        "options": options,
        "native": native_available(),
        "rows": [],
    }
    shapes = SHAPES if args.model is None else model_shapes(common.model_path(args.model))
    result["shapes"], result["shapes_of"] = shapes, "the default model" if args.model is None else args.model
    for fmt, n, k, _ in shapes:
        result["rows"] += measure_shape(fmt, n, k, args.m, args.min_time, args.cache_mb)
    result["token_ms"] = {
        m: {key: token_time(result["rows"], m, f"{key}_s", shapes) * 1e3 for key in KERNEL_KEYS}
        | {"float32": token_time(result["rows"], m, "float32_linear_s", shapes) * 1e3}
        for m in args.m
    }
    # a whole step holds ~100 MB of blocks and ~540 MB as float32: not in a --quick smoke run
    default = args.model is None and not args.quick
    result["token_measured"] = {m: measured_token(m, args.min_time) for m in args.m if m <= 8} if default else {}
    result["machine"]["load_average_after"] = common.load_now()
    return common.save(args.out, "kernels", result, draw(result), report)
