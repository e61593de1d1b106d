"""Load time and resident memory added by loading (beside llama.cpp's on a GGUF file); prefill tokens/s on
a long prompt and uncached greedy tokens/s, each beside HF transformers on the same weights in the same run.

Writes load.json and load.png."""

from __future__ import annotations

from ..cli_flags import POSITIVE
from . import common, figure, llamacpp

QUICK = dict(prompt_tokens=32, new_tokens=4, repeats=1)


def add_args(p) -> None:
    p.add_argument("--prompt-tokens", type=POSITIVE, default=512, help="prefill prompt length (default 512)")
    p.add_argument("--new-tokens", type=POSITIVE, default=32, help="uncached greedy tokens to generate (default 32)")
    p.add_argument("--repeats", type=POSITIVE, default=3, help="prefill runs per engine; the best counts (default 3)")


def prefill_times(models: common.Models, ids: list[int], repeats: int) -> dict:
    """Seconds of one forward over the prompt, ours and the reference's run alternately so that a noisy
    neighbour hits both alike. Both compute only the last position's logits."""
    import torch

    from ..model.step import LAST, CausalStep

    x = torch.tensor([ids])
    last_logits = lambda t: models.llm.model(t, CausalStep(t.shape[1], t.device, LAST))  # [1, 1, V]
    ours, ref = [], []
    with torch.inference_mode():
        last_logits(x[:, :8])  # first-call set-up is not prefill
        if models.reference is not None:
            models.reference(x[:, :8], use_cache=False, logits_to_keep=1)
        for _ in range(repeats):
            ours.append(common.timed(last_logits, x)[1])
            if models.reference is not None:
                ref.append(common.timed(models.reference, x, use_cache=False, logits_to_keep=1)[1])
    return {"ours_s": ours, "reference_s": ref}


def uncached_decode(models: common.Models, ids: list[int], n: int) -> dict:
    """Greedy n tokens recomputing the whole sequence every step (ours: cache="none"; HF: use_cache=False)."""
    import torch

    llm = models.llm
    g, wall = common.timed(llm.generate, ids, cache="none", max_tokens=n, temperature=0, ignore_eos=True)
    out = {
        "ours_wall_s": wall,
        "ours_tokens_per_s": common.per_second(n, wall),
        "ours_decode_tokens_per_s": g.stats["decode_tokens_per_s"],
    }
    if models.reference is None:
        return out
    stamps = common.TokenStamps()
    with torch.inference_mode():
        ref_ids, ref_wall = common.timed(
            models.reference.generate,
            torch.tensor([ids]),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            use_cache=False,
            pad_token_id=common.pad_id(llm),
            streamer=stamps,
        )
    ref_ids = ref_ids[0, len(ids) :].tolist()
    out.update(
        reference_wall_s=ref_wall,
        reference_tokens_per_s=common.per_second(n, ref_wall),
        reference_decode_tokens_per_s=stamps.decode_tokens_per_s(),
        same_ids=ref_ids == g.ids,
    )
    return out


def measure(models: common.Models, prompt_tokens: int, new_tokens: int, repeats: int, seed: int = 0) -> dict:
    ids = common.corpus_ids(models.llm.tokenizer)
    prompt = common.windows(ids, [prompt_tokens], seed)[0]
    pre = prefill_times(models, prompt, repeats)
    best_ours = min(pre["ours_s"])
    best_ref = min(pre["reference_s"]) if pre["reference_s"] else None
    prefill = {
        "prompt_tokens": len(prompt),
        **pre,
        "ours_tokens_per_s": common.per_second(len(prompt), best_ours),
        "reference_tokens_per_s": common.per_second(len(prompt), best_ref) if best_ref else None,
    }
    prefill["speedup"] = common.ratio(prefill["ours_tokens_per_s"], prefill["reference_tokens_per_s"])
    short = common.windows(ids, [32], seed + 1)[0]
    decode = uncached_decode(models, short, new_tokens)
    decode["speedup"] = common.ratio(decode["ours_tokens_per_s"], decode.get("reference_tokens_per_s"))
    load = {
        "ours_s": models.load_s,
        "reference_s": models.reference_load_s,
        "speedup": common.ratio(models.reference_load_s, models.load_s),
        "ours_rss_added": models.rss_added,
    }
    peer = llamacpp.peer_for(models.path, common.torch_threads())
    load.update(llamacpp_s=peer.load_s if peer else None, llamacpp_rss_added=peer.rss_added if peer else None)
    llamacpp.close(peer)
    return {
        "load": load,
        "prefill": prefill,
        "uncached_decode": {"prompt_tokens": len(short), "new_tokens": new_tokens, **decode},
    }


def report(result: dict) -> str:
    ld, pf, dc = result["load"], result["prefill"], result["uncached_decode"]

    def f(x, spec=".2f"):
        return "-" if x is None else format(x, spec)

    def mb(x):
        return "-" if x is None else f"{x / 2**20:.0f} MB"

    rows = [
        ("what", "ours", "reference", "ours/ref speed"),
        ("load (s)", f(ld["ours_s"]), f(ld["reference_s"]), f(ld["speedup"])),
        ("llama.cpp load (s), RSS added", f(ld["llamacpp_s"]), mb(ld["llamacpp_rss_added"]), ""),
        ("our RSS added by loading", mb(ld["ours_rss_added"]), "", ""),
        (
            f"prefill {pf['prompt_tokens']} tok (tok/s)",
            f(pf["ours_tokens_per_s"], ".1f"),
            f(pf["reference_tokens_per_s"], ".1f"),
            f(pf["speedup"]),
        ),
        (
            f"uncached greedy {dc['new_tokens']} tok (tok/s)",
            f(dc["ours_tokens_per_s"], ".2f"),
            f(dc.get("reference_tokens_per_s")),
            f(dc["speedup"]),
        ),
    ]
    return "\n".join(f"{a:34s} {b:>10s} {c:>10s} {d:>14s}" for a, b, c, d in rows)


def draw(result: dict):
    ld, pf, dc = result["load"], result["prefill"], result["uncached_decode"]
    names = ["tinyllm", "HF transformers", "llama.cpp"]

    def plot(fig):
        load_ax, mem_ax, rate_ax = fig.subplots(1, 3)
        figure.grouped_bars(load_ax, names, {"": [ld["ours_s"], ld["reference_s"], ld["llamacpp_s"]]}, "{:.2f}")
        load_ax.set(ylabel="seconds", title="load time")
        mb = [None if b is None else b / 2**20 for b in (ld["ours_rss_added"], ld["llamacpp_rss_added"])]
        figure.grouped_bars(mem_ax, [names[0], names[2]], {"": mb}, "{:.0f}")
        mem_ax.set(ylabel="MB", title="resident memory added by loading")
        figure.grouped_bars(
            rate_ax,
            [f"prefill\n{pf['prompt_tokens']}-token prompt", f"no cache\n{dc['new_tokens']} greedy tokens"],
            {
                names[0]: [pf["ours_tokens_per_s"], dc["ours_tokens_per_s"]],
                names[1]: [pf["reference_tokens_per_s"], dc.get("reference_tokens_per_s")],
            },
        )
        rate_ax.set(ylabel="tokens/s", title="prefill, and decode without a cache")

    return plot


def run(args, models: common.Models | None = None) -> dict:
    models = models or common.load_models(args)
    result = common.header("load", args, models)
    result.update(measure(models, args.prompt_tokens, args.new_tokens, args.repeats, args.seed))
    result["peers"] = {
        "HF transformers": result["load"]["reference_s"] is not None,
        "llama.cpp": result["load"]["llamacpp_s"] is not None,
    }
    return common.save(args.out, "load", result, draw(result), report)
