"""Speculative decoding against plain decoding on the same prompts: speed-up, acceptance rate and tokens per
target forward, for prompt lookup (on a prompt whose answer repeats it, on code editing, on free text), for
a self-draft made of the target's first layers, and for a separate draft model (`--draft-model`: a file
sharing the target's tokenizer, e.g. synthetic:llama-3.2-1b:Q4_K_M for the 3B shape). Greedy, so every row
must produce plain's exact ids.

Writes speculative.json and speculative.png."""

from __future__ import annotations

from ..cli_flags import POSITIVE
from . import common

QUICK = dict(max_tokens=8, draft_layers=[1], num_draft_tokens=2, repeats=1)

PARAGRAPH = (
    "The river rose slowly through the night, and by morning the lower fields were under water. "
    "The farmers gathered on the hill above the village, watching the brown current carry fence posts, "
    "hay bales and a single red boat past the church. Nobody spoke until the bell rang at noon."
)
CODE = (
    "def total_price(items, tax):\n    s = 0\n    for item in items:\n        s += item.price * item.count\n"
    "    s = s * (1 + tax)\n    return round(s, 2)\n"
)
TASKS = {
    "repeat": f"Repeat the following paragraph exactly, word for word:\n\n{PARAGRAPH}",
    "code-edit": f"Rename the variable s to subtotal in this Python function and show the whole function:\n\n{CODE}",
    "free-text": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
}


def add_args(p) -> None:
    p.add_argument("--max-tokens", type=POSITIVE, default=128, help="new tokens per run (default 128)")
    p.add_argument("--num-draft-tokens", type=POSITIVE, default=4, help="k, drafts per target forward (default 4)")
    p.add_argument("--draft-layers", type=POSITIVE, nargs="+", default=[4, 8], help="self-draft depths (default 4 8)")
    p.add_argument("--repeats", type=POSITIVE, default=2, help="runs per mode; the fastest counts")
    p.add_argument(
        "--draft-model",
        default=None,
        help="also a draft model: a .gguf file or synthetic:SHAPE:FORMAT sharing the target's tokenizer",
    )


def modes(args) -> list[tuple[str, object]]:
    from ..speculative.proposer import SpeculativeConfig

    k = args.num_draft_tokens
    out = [("plain", None), ("ngram", SpeculativeConfig("ngram", num_draft_tokens=k))]
    out.append(("ngram-every-step", SpeculativeConfig("ngram", num_draft_tokens=k, pacing=False)))  # unpaced
    for n in args.draft_layers:
        out.append(
            (f"self-draft-{n}", SpeculativeConfig("draft", num_draft_tokens=args.num_draft_tokens, draft_layers=n))
        )
    if args.draft_model:
        out.append(("draft-model", SpeculativeConfig("draft", num_draft_tokens=k, draft_model=args.draft_model)))
    return out


def one(llm, ids, spec, max_tokens) -> dict:
    g, wall = common.timed(llm.generate, ids, max_tokens=max_tokens, temperature=0, speculative=spec)
    s = g.stats
    return {
        "wall_s": wall,
        "decode_s": g.timings.decode_s,
        "tokens": len(g.ids),
        "ids": g.ids,
        "acceptance_rate": s.get("acceptance_rate"),
        "tokens_per_target_forward": s.get("tokens_per_target_forward"),
    }


def measure(llm, args) -> list[dict]:
    rows = []
    for name, spec in modes(args):
        if name == "draft-model":  # loads the draft model outside the timed runs
            llm.generate("Hello", max_tokens=2, temperature=0, speculative=spec)
    for task, text in TASKS.items():
        ids = llm.tokenizer.encode_chat([{"role": "user", "content": text}]).ids
        runs: dict[str, dict] = {}
        for r in range(args.repeats):
            ms = modes(args)
            for k in range(len(ms)):  # modes take turns so a busy spell does not fall on one only
                name, spec = ms[(k + r) % len(ms)]
                run = one(llm, ids, spec, args.max_tokens)
                if name not in runs or run["decode_s"] < runs[name]["decode_s"]:
                    runs[name] = run
        plain = runs["plain"]
        for name, run in runs.items():
            rows.append(
                {
                    "task": task,
                    "mode": name,
                    "tokens": run["tokens"],
                    "decode_tokens_per_s": common.per_second(run["tokens"] - 1, run["decode_s"]),
                    "speedup_vs_plain": common.ratio(plain["decode_s"], run["decode_s"]),
                    "acceptance_rate": run["acceptance_rate"],
                    "tokens_per_target_forward": run["tokens_per_target_forward"],
                    "same_ids_as_plain": run["ids"] == plain["ids"],
                }
            )
    return rows


def draw(rows):
    def paint(fig):
        ax = fig.add_subplot(1, 1, 1)
        tasks = list(TASKS)
        names = [r["mode"] for r in rows if r["task"] == tasks[0]]
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            values = [next(r["speedup_vs_plain"] for r in rows if r["task"] == t and r["mode"] == name) for t in tasks]
            ax.bar([j + i * width for j in range(len(tasks))], values, width, label=name)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(tasks))], tasks)
        ax.set_ylabel("decode speed-up over plain (same run)")
        ax.legend()

    return paint


def report(rows) -> str:
    lines = [f"{'task':10s} {'mode':14s} {'tok/s':>7s} {'speedup':>8s} {'accept':>7s} {'tok/fwd':>7s} same"]
    for r in rows:
        acc = "" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.2f}"
        tpf = "" if r["tokens_per_target_forward"] is None else f"{r['tokens_per_target_forward']:.2f}"
        lines.append(
            f"{r['task']:10s} {r['mode']:14s} {r['decode_tokens_per_s']:7.1f} "
            f"{r['speedup_vs_plain']:8.2f} {acc:>7s} {tpf:>7s} {r['same_ids_as_plain']}"
        )
    return "\n".join(lines)


def run(args, models: common.Models | None = None) -> dict:
    if args.draft_model:
        args.draft_model = common.model_path(args.draft_model)  # a synthetic file is built once, before any timing
    models = models or common.load_models(args, want_reference=False)
    result = common.header("speculative", args, models)
    result["rows"] = measure(models.llm, args)
    return common.save(args.out, "speculative", result, draw(result["rows"]), lambda r: report(r["rows"]))
