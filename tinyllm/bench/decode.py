"""Greedy decode tokens/s of the reference loop with cache none vs contiguous, and of the engine (the product
path: paged KV, float32 and float16, with `--weights` or its default; and each loaded beside with 8-bit
activations, weights="native-int8", 24-bit ones, "native-int24", and float32 ones, "native"), for growing
numbers of new tokens, beside HF transformers' cached generate and llama.cpp at batch 1 on the same
weights; and prefill tokens/s of a long prompt through the engine, beside llama.cpp's. Beside each cached row,
its memory floor (bound.py): the most tokens/s the bytes a decode step reads allow at the measured read rate.

Writes decode.json and decode.png (time against new tokens for every mode)."""

from __future__ import annotations

import time

from ..cli_flags import POSITIVE
from . import bound, common, figure, llamacpp

QUICK = dict(new_tokens=[4, 8], prompt_tokens=16, repeats=1, prefill_tokens=32)
# (row name, LLM.generate keywords), one row each: the reference loop without a cache and with a contiguous
# one, then the engine (LLM.generate's own path) with float32, float16 and q8_0 KV.
MODES = [
    ("none", dict(cache="none")),
    ("contiguous", dict(cache="contiguous")),
    ("engine", dict(cache="paged")),
    ("engine-f16", dict(cache="paged", kv_dtype="float16")),
    ("engine-int8", dict(cache="paged")),  # the rows named engine-int8* run a second LLM, weights="native-int8"
    ("engine-int8-f16", dict(cache="paged", kv_dtype="float16")),
    ("engine-q8kv", dict(cache="paged", kv_dtype="q8_0")),
    ("engine-int8-q8kv", dict(cache="paged", kv_dtype="q8_0")),
    ("engine-int24", dict(cache="paged")),  # and engine-int24*, weights="native-int24"
    ("engine-int24-f16", dict(cache="paged", kv_dtype="float16")),
    ("engine-float", dict(cache="paged")),  # and engine-float*, weights="native" (float32 activations)
    ("engine-float-f16", dict(cache="paged", kv_dtype="float16")),
]
# llama.cpp's KV settings (--llamacpp-kv): row name, its KV type and whether it runs flash attention (which a
# quantized V cache needs). "f16" is its plain setting, the row named llama.cpp.
LLAMACPP_KV = {
    "f16": ("llama.cpp", "f16", False),
    "f16-fa": ("llama.cpp-f16-fa", "f16", True),
    "q8_0": ("llama.cpp-q8kv", "q8_0", True),
}
INT8, INT24, FLOAT = "engine-int8", "engine-int24", "engine-float"
# a row name's start -> the LLM it runs on (the rows named engine... otherwise run `--weights`, or its default)
WEIGHTS_OF = {INT8: "native-int8", INT24: "native-int24", FLOAT: "native"}
# the LLMs loaded beside, for the prefill line: weights, the result's key part, the report's label
OTHER_PREFILLS = (("native-int8", "int8", "8-bit"), ("native-int24", "int24", "24-bit"), ("native", "float", "float32"))
AIM_CACHED_OVER_NONE = 5.0  # at the longest run
AIM_OVER_REFERENCE = 4.0  # contiguous vs HF generate, batch 1


def add_args(p) -> None:
    p.add_argument(
        "--new-tokens",
        type=POSITIVE,
        nargs="+",
        default=[32, 64, 128, 256],
        help="numbers of new tokens (default 32 64 128 256)",
    )
    p.add_argument("--prompt-tokens", type=POSITIVE, default=32, help="prompt length (default 32)")
    p.add_argument("--repeats", type=POSITIVE, default=1, help="runs per mode and length; the fastest counts")
    p.add_argument(
        "--modes",
        nargs="+",
        default=[m for m, _ in MODES],
        choices=[m for m, _ in MODES],
        help="our cache modes to run (default all)",
    )
    p.add_argument("--prefill-tokens", type=POSITIVE, default=512, help="prompt length of the prefill comparison")
    p.add_argument(
        "--tensor-parallel-size",
        type=POSITIVE,
        nargs="+",
        default=None,
        help="instead: the engine split over each of these numbers of processes, with its all-reduce time",
    )
    p.add_argument(
        "--llamacpp-kv",
        nargs="+",
        default=["f16"],
        choices=list(LLAMACPP_KV),
        help="llama.cpp's KV settings, a row each: f16 (its default, no flash attention), f16-fa (with flash "
        "attention), q8_0 (8-bit keys and values, flash attention) (default f16)",
    )


def ours(llm, ids: list[int], n: int, options: dict, engines: dict | None = None) -> dict:
    """One greedy run. `engines` keeps each KV type's engine of an LLM between the rows' turns (an LLM holds
    one engine, made again when the KV type changes), so that every row's repeats find its prompt's keys in
    its prefix cache, as llama.cpp's repeats find theirs."""
    key = (id(llm), options.get("kv_dtype"))
    if engines is not None and key in engines:
        llm._shared.engine, llm._shared.key = engines[key]
    g, wall = common.timed(llm.generate, ids, max_tokens=n, temperature=0, ignore_eos=True, **options)
    if engines is not None:
        engines[key] = (llm._shared.engine, llm._shared.key)
    return {
        "wall_s": wall,
        "load_1min": common.load_now(),
        "ttft_s": g.timings.ttft_s,
        "decode_tokens_per_s": g.stats["decode_tokens_per_s"],
        "cached_tokens": g.stats["cached_tokens"],
        "ids": g.ids,
    }


def reference(ref, ids: list[int], n: int, pad: int) -> dict:
    import torch

    stamps = common.TokenStamps()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = ref.generate(
            torch.tensor([ids]),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            use_cache=True,
            pad_token_id=pad,
            streamer=stamps,
        )
    wall = time.perf_counter() - t0
    ttft = stamps.times[0] - t0 if stamps.times else None
    return {
        "wall_s": wall,
        "load_1min": common.load_now(),
        "ttft_s": ttft,
        "decode_tokens_per_s": stamps.decode_tokens_per_s(),
        "ids": out[0, len(ids) :].tolist(),
    }


def other_llm(models: common.Models, row: str):
    """The LLM that rows named `row`... run on: the same file with weights="native-int8", "native-int24" or
    "native", loaded once; None (and a note) where the model has no weight in a format the mode covers."""
    from ..errors import TinyLLMError
    from ..llm import LLM

    weights = WEIGHTS_OF[row]
    if weights not in models.others:
        try:
            models.others[weights] = LLM(models.path, weights=weights)
        except TinyLLMError as exc:
            print(f"skipping the {row} modes: {exc}")
            models.others[weights] = None
    return models.others[weights]


def runs_on(models: common.Models, name: str):
    """The LLM a row runs on (None: skipped)."""
    for row in sorted(WEIGHTS_OF, key=len, reverse=True):
        if name == row or name.startswith(row + "-"):
            return other_llm(models, row)
    return models.llm


def q8kv_refused(llm) -> str | None:
    """Why the q8_0 KV rows cannot run on this model (and a note saying so), or None."""
    from ..cache.q8_kv import check_q8_head_dim
    from ..errors import TinyLLMError

    try:
        check_q8_head_dim(llm.config.head_dim)
    except TinyLLMError as exc:
        print(f"skipping the q8kv modes: {exc}")
        return str(exc)
    return None


def runners(models: common.Models, ids: list[int], modes: list[str], peers=None) -> list[tuple[str, callable]]:
    llm, out, engines = models.llm, [], {}
    q8_refused = q8kv_refused(llm) if any(m.endswith("q8kv") for m in modes) else None
    for name, options in MODES:
        if name.endswith("q8kv") and q8_refused:
            continue
        target = runs_on(models, name) if name in modes else None
        if target is not None:
            out.append((name, lambda n, o=options, m=target: ours(m, ids, n, o, engines)))
    if models.reference is not None:
        out.append(("reference", lambda n: reference(models.reference, ids, n, common.pad_id(llm))))
    for name, peer in (peers or {}).items():
        out.append((name, lambda n, p=peer: {**llamacpp.decode(p, ids, n), "load_1min": common.load_now()}))
    return out


def measure(
    models: common.Models,
    prompt_tokens: int,
    new_tokens: list[int],
    repeats: int,
    seed: int = 0,
    modes: list[str] | None = None,
    peers=None,
) -> dict:
    """Every (mode, n) run `repeats` times; within one n the modes take turns (in a rotating order) so that a
    busy spell on the machine does not fall on one mode only. The fastest run of each counts."""
    ids = common.windows(common.corpus_ids(models.llm.tokenizer), [prompt_tokens], seed)[0]
    modes = runners(models, ids, modes or [m for m, _ in MODES], peers)
    for _, fn in modes:
        fn(2)  # first-call set-up
    best: dict[tuple[str, int], dict] = {}
    rates: dict[tuple[str, int], list] = {}
    for n in new_tokens:
        for r in range(repeats):
            for k in range(len(modes)):
                name, fn = modes[(k + r + n) % len(modes)]
                run = fn(n)
                rates.setdefault((name, n), []).append(run["decode_tokens_per_s"])
                if (name, n) not in best or run["wall_s"] < best[(name, n)]["wall_s"]:
                    best[(name, n)] = run
    first = modes[0][0]
    expected = {n: best[("contiguous" if ("contiguous", n) in best else first, n)]["ids"] for n in new_tokens}
    rows = []
    for (name, n), run in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        same = run.pop("ids") == expected[n]
        rows.append(
            {
                "mode": name,
                "new_tokens": n,
                "tokens_per_s": common.per_second(n, run["wall_s"]),
                "same_ids_as_contiguous": same,
                **run,
                "decode_tokens_per_s_median": common.percentile(rates[(name, n)], 50),
            }
        )
    return {"prompt_tokens": len(ids), "rows": rows, "ratios": ratios(rows, new_tokens)}


def ratios(rows: list[dict], new_tokens: list[int]) -> dict:
    """Decode tokens/s of one mode over another, per n; and whether the aims are reached at the longest n."""
    rate = {(r["mode"], r["new_tokens"]): r["decode_tokens_per_s"] for r in rows}
    out = {
        "contiguous_over_none": {},
        "contiguous_over_reference": {},
        "engine_over_contiguous": {},
        "engine_f16_over_engine": {},
        "engine_over_llamacpp": {},
        "engine_f16_over_llamacpp": {},
        "engine_int8_over_engine": {},
        "engine_int8_over_llamacpp": {},
        "engine_int24_over_engine": {},
        "engine_int24_over_llamacpp": {},
        "engine_float_over_llamacpp": {},
        "engine_q8kv_over_llamacpp_q8kv": {},
        "engine_int8_q8kv_over_llamacpp_q8kv": {},
    }
    for n in new_tokens:
        out["contiguous_over_none"][n] = common.ratio(rate.get(("contiguous", n)), rate.get(("none", n)))
        out["contiguous_over_reference"][n] = common.ratio(rate.get(("contiguous", n)), rate.get(("reference", n)))
        out["engine_over_contiguous"][n] = common.ratio(rate.get(("engine", n)), rate.get(("contiguous", n)))
        out["engine_f16_over_engine"][n] = common.ratio(rate.get(("engine-f16", n)), rate.get(("engine", n)))
        out["engine_over_llamacpp"][n] = common.ratio(rate.get(("engine", n)), rate.get(("llama.cpp", n)))
        out["engine_f16_over_llamacpp"][n] = common.ratio(rate.get(("engine-f16", n)), rate.get(("llama.cpp", n)))
        out["engine_int8_over_engine"][n] = common.ratio(rate.get((INT8, n)), rate.get(("engine", n)))
        out["engine_int8_over_llamacpp"][n] = common.ratio(rate.get((INT8, n)), rate.get(("llama.cpp", n)))
        out["engine_int24_over_engine"][n] = common.ratio(rate.get((INT24, n)), rate.get(("engine", n)))
        out["engine_int24_over_llamacpp"][n] = common.ratio(rate.get((INT24, n)), rate.get(("llama.cpp", n)))
        out["engine_float_over_llamacpp"][n] = common.ratio(rate.get((FLOAT, n)), rate.get(("llama.cpp", n)))
        q8 = rate.get(("llama.cpp-q8kv", n))
        out["engine_q8kv_over_llamacpp_q8kv"][n] = common.ratio(rate.get(("engine-q8kv", n)), q8)
        out["engine_int8_q8kv_over_llamacpp_q8kv"][n] = common.ratio(rate.get(("engine-int8-q8kv", n)), q8)
    longest = max(new_tokens)
    cached = out["contiguous_over_none"][longest]
    vs_ref = out["contiguous_over_reference"][longest]
    out["aims"] = {
        "cached_over_none": AIM_CACHED_OVER_NONE,
        "cached_over_none_reached": cached is not None and cached >= AIM_CACHED_OVER_NONE,
        "over_reference": AIM_OVER_REFERENCE,
        "over_reference_reached": vs_ref is not None and vs_ref >= AIM_OVER_REFERENCE,
        "at": longest,
    }
    return out


def draw(result: dict):
    def plot(fig):
        left, right = fig.subplots(1, 2)
        lines = 0
        for name in [m for m, _ in MODES] + ["reference"] + [row for row, _, _ in LLAMACPP_KV.values()]:
            pts = [
                (r["new_tokens"], r["wall_s"], r["decode_tokens_per_s"]) for r in result["rows"] if r["mode"] == name
            ]
            if not pts:
                continue
            label = "HF transformers (cached)" if name == "reference" else name
            left.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **figure.style(lines))
            right.plot([p[0] for p in pts], [p[2] for p in pts], label=label, **figure.style(lines))
            lines += 1
        left.set(xlabel="new tokens", ylabel="wall time (s)", title="greedy generate, batch 1")
        right.set(xlabel="new tokens", ylabel="decode tokens/s", title="decode rate", yscale="log")
        counts = sorted({r["new_tokens"] for r in result["rows"]})
        for ax in (left, right):
            ax.set_xticks(counts, [str(n) for n in counts])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)

    return plot


def report(result: dict) -> str:
    lines = [
        f"{'mode':16s} {'new':>5s} {'wall s':>8s} {'decode tok/s':>13s} {'median':>7s} {'ttft s':>7s} "
        f"{'same ids':>9s} {'load':>5s}"
    ]
    for r in result["rows"]:
        ttft = "-" if r["ttft_s"] is None else f"{r['ttft_s']:.3f}"
        load = "-" if r["load_1min"] is None else f"{r['load_1min']:.1f}"
        median = r.get("decode_tokens_per_s_median")
        lines.append(
            f"{r['mode']:16s} {r['new_tokens']:5d} {r['wall_s']:8.2f} {r['decode_tokens_per_s']:13.2f} "
            f"{'-' if median is None else format(median, '.2f'):>7s} "
            f"{ttft:>7s} {str(r['same_ids_as_contiguous']):>9s} {load:>5s}"
        )
    pf = result["prefill"]
    lines.append(
        f"prefill {pf['prompt_tokens']} tok (tok/s): ours {pf['ours_tokens_per_s']:.1f}  llama.cpp "
        f"{'-' if pf['llamacpp_tokens_per_s'] is None else format(pf['llamacpp_tokens_per_s'], '.1f')}"
        + "".join(
            f"  ours, {label} activations {pf[f'ours_{name}_tokens_per_s']:.1f}"
            for _, name, label in OTHER_PREFILLS
            if f"ours_{name}_tokens_per_s" in pf
        )
    )
    for r in result["rows"]:
        f = r.get("memory_floor")
        if f:
            lines.append(
                f"memory floor, {r['mode']} {r['new_tokens']}: weights {f['weight_mb_per_step']:.1f} MB + KV "
                f"{f['kv_mb_per_step']:.1f} MB a step at {f['read_gb_per_s']:.1f} GB/s: at most "
                f"{f['most_tokens_per_s']:.1f} tok/s; {100 * r['share_of_memory_floor']:.0f}% of that"
            )
    for key, per_n in result["ratios"].items():
        if key != "aims":
            cells = (f"{n}: {'-' if v is None else f'{v:.2f}'}" for n, v in per_n.items())
            lines.append(f"{key:28s} " + "  ".join(cells))
    return "\n".join(lines)


def engine_prefill(llm, ids: list[int]) -> float:
    """Seconds for the engine to take the prompt in one step and sample its first token: the product path,
    where every chunk runs the native step when the model has one. A fresh engine, so no prefix is cached."""
    from ..engine.engine import Engine
    from ..sampling.params import SamplingParams

    c = llm.config
    per_token = 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4  # float32 keys and values of every layer
    engine = Engine(llm.parts, max_num_batched_tokens=len(ids), kv_memory_bytes=max(64 << 20, 2 * len(ids) * per_token))
    t0 = time.perf_counter()
    engine.add_request(ids, SamplingParams(temperature=0, max_tokens=1, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    return time.perf_counter() - t0


def run(args, models: common.Models | None = None) -> dict:
    if args.tensor_parallel_size:
        from . import parallel

        return parallel.run(args)
    models = models or common.load_models(args)
    result = common.header("decode", args, models)
    n_ctx = max(2048, args.prompt_tokens + max(args.new_tokens) + 8, args.prefill_tokens + 8)
    peers = {}
    if llamacpp.peer_usable(models.path):
        for kind in args.llamacpp_kv:
            row, kv, flash = LLAMACPP_KV[kind]
            peers[row] = llamacpp.load(models.path, common.torch_threads(), n_ctx, kv=kv, flash_attn=flash)
    peer = next(iter(peers.values()), None)  # the prefill comparison's: the first setting asked for
    result.update(measure(models, args.prompt_tokens, args.new_tokens, args.repeats, args.seed, args.modes, peers))
    prompt = common.windows(common.corpus_ids(models.llm.tokenizer), [args.prefill_tokens], args.seed + 1)[0]
    repeats = max(2, args.repeats)
    result["prefill"] = llamacpp.prefill_pair(lambda: engine_prefill(models.llm, prompt), peer, prompt, repeats)
    for weights, name, _ in OTHER_PREFILLS:
        other = models.others.get(weights)
        if other is not None:  # its prefill beside the same peer figure
            other_s = min(engine_prefill(other, prompt) for _ in range(repeats + 1))  # the first run sets up
            result["prefill"][f"ours_{name}_tokens_per_s"] = len(prompt) / other_s
    for p in peers.values():
        llamacpp.close(p)
    add_memory_floors(result, models.llm.model)
    modes = {r["mode"] for r in result["rows"]}
    result["peers"] = {"HF transformers": "reference" in modes, **{row: row in modes for row in peers}}
    return common.save(args.out, "decode", result, draw(result), report)


# KV bytes an element (llama.cpp: f16, or q8_0: 34 bytes a run of 32, as ours)
FLOORED = {
    "contiguous": 4,
    "engine": 4,
    "engine-f16": 2,
    "engine-q8kv": 1 + 2 / 32,
    "llama.cpp": 2,
    "llama.cpp-f16-fa": 2,
    "llama.cpp-q8kv": 1 + 2 / 32,
}


def add_memory_floors(result: dict, model) -> None:
    """Each row of the main model's weights with the memory floor of its decode steps (bound.py) at the read
    rate measured now, and the share of it the row reached. The 8-bit rows hold weights of their own and have
    none."""
    rate = common.read_rate()
    for r in result["rows"]:
        itemsize = FLOORED.get(r["mode"])
        floor = itemsize and bound.memory_floor(model, itemsize, result["prompt_tokens"], r["new_tokens"], rate)
        r["memory_floor"] = floor or None
        if floor:
            r["share_of_memory_floor"] = r["decode_tokens_per_s"] / floor["most_tokens_per_s"]
