"""Shared pieces of the benchmarks: timing, percentiles, the workload text, machine facts, output files,
and loading our model and the reference implementation (HF transformers) on the same weights.

Heavy imports (torch, transformers, matplotlib) happen inside functions, so building the CLI stays fast.
"""

from __future__ import annotations

import json
import os
import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import figure

# ---- timing and statistics


def timed(fn: Callable, *args, **kwargs) -> tuple[object, float]:
    """(fn's result, wall seconds)."""
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - t0


def percentile(values, q: float) -> float | None:
    """The q-th percentile (0..100), linear between closest ranks; None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary(values) -> dict:
    """p50/p90/p99, mean, min, max of a list of seconds (None entries for an empty list)."""
    xs = list(values)
    return {
        "n": len(xs),
        "p50": percentile(xs, 50),
        "p90": percentile(xs, 90),
        "p99": percentile(xs, 99),
        "mean": sum(xs) / len(xs) if xs else None,
        "min": min(xs, default=None),
        "max": max(xs, default=None),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def per_second(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


class TokenStamps:
    """A streamer for HF generate: stamps the time of every generated step (the first put is the prompt),
    so the reference's decode rate is measured the way ours is, from its first token to its last."""

    def __init__(self):
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass

    def decode_tokens_per_s(self, tokens_per_step: int = 1) -> float:
        if len(self.times) < 2:
            return 0.0
        return per_second((len(self.times) - 1) * tokens_per_step, self.times[-1] - self.times[0])


# ---- workload text


def corpus_ids(tokenizer, max_chars: int = 120_000) -> list[int]:
    """Token ids of real English prose that every Python install carries: the language reference's topics
    (pydoc_data), in a fixed order, so every run and both engines see the same prompts."""
    try:
        from pydoc_data.topics import topics

        text = "\n\n".join(topics[k] for k in sorted(topics))[:max_chars]
    except ImportError:  # a stripped Python: fall back on a fixed paragraph
        text = " ".join(f"Sentence {i} tells of a river, a bridge and {i * 7} travellers." for i in range(4000))
    return tokenizer.encode(text[:max_chars], add_special_tokens=False)


def windows(ids: list[int], lengths: list[int], seed: int) -> list[list[int]]:
    """One slice of the corpus per length, at seeded offsets (the corpus is repeated if too short)."""
    rng = random.Random(seed)
    longest = max(lengths, default=1)
    source = ids * (1 + longest // max(1, len(ids)))
    out = []
    for n in lengths:
        start = rng.randrange(0, max(1, len(source) - n))
        out.append(source[start : start + n])
    return out


# ---- machine and output files


def load_now() -> float | None:
    """The 1-minute load average: next to each run, it shows which ones a busy neighbour disturbed."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def fma_rate(threads: int, seconds: float = 0.2) -> float | None:
    """G float32 multiply-adds a second that `threads` threads get right now on registers alone (no memory),
    with FMAs as wide as the kernels' (fma_lanes), or None without the native library. On a shared or virtual
    machine it moves between runs (two cores whose sibling hardware threads the host gives to other work
    deliver about one core's FMAs), so a result file records it before and after its runs: a run's rate over
    it is the share of the machine's compute it used."""
    from ..kernels import native

    lib = native.library()
    return None if lib is None else lib.tl_fma_rate(threads, seconds) / 1e9


def read_rate(threads: int | None = None, mb: int = 256, tries: int = 5) -> float:
    """GB a second torch reads from memory here: the best of `tries` sums over a float32 buffer of `mb` MB (far
    larger than the caches), on `threads` threads (torch's count by default)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        buf = torch.ones(mb << 18)  # written first, so every page is there before the timing
        best = min(timed(buf.sum)[1] for _ in range(tries))
        return buf.nbytes / best / 1e9
    finally:
        torch.set_num_threads(before)


def fma_lanes() -> int | None:
    """The lanes of the FMA rate's vectors: 16 with AVX-512, 8 with AVX2 or NEON; None without the library."""
    from ..kernels import native

    lib = native.library()
    return None if lib is None else lib.tl_fma_lanes()


def compute_now() -> dict:
    """fma_rate on one thread and on torch's thread count."""
    n = torch_threads()
    return {"fma_gmacs_1_thread": fma_rate(1), f"fma_gmacs_{n}_threads": fma_rate(n)}


def machine_info() -> dict:
    import torch

    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu": _cpu_model(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "compute_before": compute_now(),
        "fma_lanes": fma_lanes(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def write_json(out_dir: str, name: str, data: dict) -> str:
    """Write data as out_dir/name.json, noting the machine's load now: a busy neighbour during the run shows
    as a load average well above the cores the run itself used."""
    if isinstance(data.get("machine"), dict) and hasattr(os, "getloadavg"):
        data["machine"]["load_average_after"] = list(os.getloadavg())
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=2, default=str)
    return path


def save(out_dir: str, name: str, result: dict, draw: Callable | None, report: Callable[[dict], str]) -> dict:
    """The end of every bench: the captioned PNG, the JSON, and the report on stdout."""
    machine = result.get("machine")
    if isinstance(machine, dict) and "compute_before" in machine:
        machine["compute_after"] = compute_now()
    result["png"] = figure.write(out_dir, name, draw, result) if draw is not None else None
    result["json"] = write_json(out_dir, name, result)
    print(report(result))
    if isinstance(machine, dict) and "compute_before" in machine:
        print(compute_line(machine["compute_before"], machine["compute_after"], machine.get("fma_lanes")))
    return result


def compute_line(before: dict, after: dict, lanes: int | None = None) -> str:
    """The FMA rates before and after the runs, on one line of the report."""

    def rates(d: dict) -> str:
        return " / ".join("n/a" if v is None else f"{v:.1f}" for v in d.values())

    threads = " / ".join(k.removeprefix("fma_gmacs_").replace("_", " ") for k in before)
    wide = f"{lanes}-lane " if lanes else ""
    return (
        f"cores' float32 FMA rate ({wide}FMAs), G multiply-adds/s ({threads}): "
        f"before {rates(before)}, after {rates(after)}"
    )


# ---- models


@dataclass
class Models:
    llm: object
    reference: object | None  # HF LlamaForCausalLM on the same weights, or None
    path: str
    load_s: float | None = None
    reference_load_s: float | None = None
    rss_added: int | None = None  # resident bytes our load added
    others: dict = field(default_factory=dict)  # weights mode -> another LLM on the same file (or None: refused)


def model_path(path: str | None) -> str:
    """--model as a file or folder; the default model when none; synthetic:SHAPE:FORMAT built on first use."""
    from ..loading.default_model import default_model_path
    from .synthetic import is_synthetic, synthetic_path

    if is_synthetic(path):
        return synthetic_path(path)
    return os.path.abspath(path) if path else default_model_path()


def warm_file_cache(path: str) -> None:
    """Read the weights once so neither engine's load time pays for the first disk read."""
    files = [path] if os.path.isfile(path) else [os.path.join(path, f) for f in sorted(os.listdir(path))]
    for file in files:
        if os.path.isfile(file):
            with open(file, "rb") as f:
                while f.read(1 << 24):
                    pass


def load_ours(path: str, dtype: str = "float32", weights: str | None = None, quantize: str | None = None):
    """(LLM, seconds, resident bytes added)."""
    from ..llm import LLM
    from .llamacpp import measure_load

    return measure_load(LLM, path, dtype=dtype, weights=weights, quantize=quantize)


def load_reference(path: str, dtype: str = "float32"):
    """(HF LlamaForCausalLM on the same weights in the same compute dtype, seconds); a .gguf goes through
    gguf_file."""
    import torch
    from transformers import LlamaForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    options = {"dtype": getattr(torch, dtype)}
    if os.path.isfile(path):
        path, options["gguf_file"] = os.path.split(path)
    model, seconds = timed(LlamaForCausalLM.from_pretrained, path, **options)
    return model.eval(), seconds


def load_models(args, want_reference: bool = True) -> Models:
    """Ours, then the reference (unless --no-reference or transformers is missing), each timed."""
    path = model_path(args.model)
    warm_file_cache(path)
    dtype = getattr(args, "dtype", "float32")
    llm, load_s, rss = load_ours(path, dtype, getattr(args, "weights", None), getattr(args, "quantize", None))
    ref, ref_s = None, None
    if want_reference and not args.no_reference:
        try:
            ref, ref_s = load_reference(path, dtype)
        except ImportError:
            print("transformers is not installed: the reference columns stay empty")
    return Models(llm, ref, path, load_s, ref_s, rss)


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def pad_id(llm) -> int:
    return int(llm.eos_ids[0]) if llm.eos_ids else 0


def header(kind: str, args, models: Models) -> dict:
    """The part every result file starts with: what ran, on what, with which options (and the activations'
    bits the main model's matmuls took: `--weights`, or its default on this CPU)."""
    from ..model.quant_linear import activations

    options = {k: v for k, v in vars(args).items() if k not in ("func", "bench_run")}
    return {
        "bench": kind,
        "model": models.path,
        "machine": machine_info(),
        "options": options,
        "activation_bits": activations(models.llm.model)["activation_bits"],
        "reference": f"transformers.LlamaForCausalLM ({options.get('dtype', 'float32')}, same weights)"
        if models.reference
        else None,
    }
