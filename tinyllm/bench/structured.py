"""Structured output: the grammar mask's cost per token (p50/p99 ms) for a JSON schema, a regex and a forced tool
call (tool_choice "required"), their compile
time, and decode tokens/s of constrained against unconstrained requests, alone and with many running at once (half
of them constrained).

The mask cost is measured on the constraint code the engine runs: each generated text is replayed through a fresh
matcher, timing `allowed(ids[:i])` (one token consumed, one mask computed) at every position.
Writes structured.json and structured.png (mask cost per kind, decode rates)."""

from __future__ import annotations

import time

from ..cli_flags import POSITIVE
from . import common

QUICK = dict(max_tokens=24, concurrent=4, repeats=1)
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "pattern": "^[a-z]{2,10}@[a-z]{2,10}\\.(com|org)$"},
        "role": {"enum": ["admin", "user", "guest"]},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 1, "maxItems": 4},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "email", "role", "skills", "address"],
    "additionalProperties": False,
}
REGEX = r"[A-Z][a-z]{1,12} [A-Z][a-z]{1,12}, [0-9]{3}-[0-9]{3}-[0-9]{4}, [a-z]{2,10}@[a-z]{2,10}\.(com|org|net)"
# tool_choice "required" over two functions: the call wrapper around each function's arguments
TOOL_FUNCTIONS = [
    {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
    {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}}}},
]
PROMPTS = {
    "json_schema": "Describe a made-up employee as JSON.",
    "regex": "Write a made-up name, phone number and email address.",
    "tool_call": "What is the weather in Paris? Call a function.",
}


def add_args(p) -> None:
    p.add_argument("--max-tokens", type=POSITIVE, default=160, help="token budget of each request (default 160)")
    p.add_argument("--concurrent", type=POSITIVE, default=32, help="requests at once, half constrained (default 32)")
    p.add_argument("--repeats", type=POSITIVE, default=3, help="seeds per kind for the mask cost (default 3)")


def _constraints():
    from ..grammar.structured import StructuredOutput
    from ..text.tool_calls import HERMES, call_grammar

    return {
        "json_schema": StructuredOutput.json_schema(SCHEMA),
        "regex": StructuredOutput.regex(REGEX),
        "tool_call": StructuredOutput.grammar(call_grammar(HERMES, TOOL_FUNCTIONS)),
    }


def _prompt(llm, text: str) -> list[int]:
    return llm.tokenizer.encode_chat([{"role": "user", "content": text}]).ids


def compile_times(llm) -> dict:
    """Seconds to build the vocabulary view, then ms to compile each constraint (a fresh cache each)."""
    from ..grammar.constraint import Grammars

    grammars = Grammars(llm.tokenizer, llm.config.vocab_size, llm.eos_ids)
    _, vocab_s = common.timed(grammars._vocabulary)
    out = {"vocabulary_s": vocab_s}
    for kind, structured in _constraints().items():
        _, seconds = common.timed(grammars.compile, structured)
        out[f"{kind}_ms"] = 1e3 * seconds
    return out


def mask_costs(llm, max_tokens: int, repeats: int) -> dict:
    """Per kind: p50/p99 ms of one step of the matcher (consume + mask), over `repeats` sampled generations."""
    from ..sampling.params import SamplingParams

    out = {}
    for kind, structured in _constraints().items():
        ms, lengths = [], []
        for seed in range(repeats):
            p = SamplingParams(temperature=0.8, seed=seed, max_tokens=max_tokens, structured=structured)
            ids = llm.generate(_prompt(llm, PROMPTS[kind]), params=p).ids
            lengths.append(len(ids))
            constraint = llm.grammars.constraint(structured)
            for i in range(len(ids)):
                t0 = time.perf_counter()
                constraint.allowed(ids[:i])
                ms.append(1e3 * (time.perf_counter() - t0))
        out[kind] = {
            "steps": len(ms),
            "p50_ms": common.percentile(ms, 50),
            "p99_ms": common.percentile(ms, 99),
            "mean_ms": sum(ms) / len(ms),
            "tokens_per_generation": lengths,
        }
    return out


def decode_rates(llm, max_tokens: int, concurrent: int) -> dict:
    """Decode tokens/s at batch 1 (constrained and not), and the throughput of `concurrent` requests at once, all
    unconstrained against half constrained."""
    from ..sampling.params import SamplingParams

    structured = _constraints()["json_schema"]
    prompt = _prompt(llm, PROMPTS["json_schema"])
    free = SamplingParams(temperature=0.8, seed=0, max_tokens=max_tokens)
    held = free.replace(structured=structured)
    llm.generate(prompt, params=held.replace(max_tokens=4))  # first-call set-up
    out = {}
    for name, p in (("unconstrained", free), ("constrained", held)):
        g = llm.generate(prompt, params=p)
        out[f"batch1_{name}_decode_tokens_per_s"] = g.stats["decode_tokens_per_s"]
        out[f"batch1_{name}_tokens"] = len(g.ids)
    for name, half in (("unconstrained", free), ("half_constrained", held)):
        params = [free.replace(seed=i) if i % 2 == 0 else half.replace(seed=i) for i in range(concurrent)]
        engine = llm.engine(max_num_seqs=concurrent)
        gens, wall = common.timed(engine.generate, [prompt] * concurrent, params)
        out[f"concurrent_{name}_tokens_per_s"] = common.per_second(sum(len(g.ids) for g in gens), wall)
    return out


def draw(result: dict):
    def plot(fig):
        left, right = fig.subplots(1, 2)
        kinds = list(result["mask"])
        for offset, q in ((-0.2, "p50"), (0.2, "p99")):
            left.bar(
                [i + offset for i in range(len(kinds))],
                [result["mask"][k][f"{q}_ms"] for k in kinds],
                width=0.4,
                label=q,
            )
        left.set(xticks=range(len(kinds)), xticklabels=kinds, ylabel="ms per token", title="grammar mask cost")
        rates = {k: v for k, v in result["decode"].items() if k.endswith("_per_s")}
        right.barh(list(rates), list(rates.values()))
        right.set(xlabel="tokens/s", title="decode rate")
        left.legend(fontsize=8)
        fig.tight_layout()

    return plot


def report(result: dict) -> str:
    c = result["compile"]
    compiled = ", ".join(f"{k[: -len('_ms')]} {v:.1f} ms" for k, v in c.items() if k.endswith("_ms"))
    lines = [f"vocabulary view {c['vocabulary_s']:.2f} s; compile {compiled}"]
    for kind, m in result["mask"].items():
        lines.append(f"mask {kind:12s} p50 {m['p50_ms']:.3f} ms  p99 {m['p99_ms']:.3f} ms  ({m['steps']} steps)")
    for key, value in result["decode"].items():
        lines.append(f"{key:45s} {value:.1f}" if isinstance(value, float) else f"{key:45s} {value}")
    return "\n".join(lines)


def run(args, models: common.Models | None = None) -> dict:
    models = models or common.load_models(args, want_reference=False)
    result = common.header("structured", args, models)
    result["compile"] = compile_times(models.llm)
    result["mask"] = mask_costs(models.llm, args.max_tokens, args.repeats)
    result["decode"] = decode_rates(models.llm, args.max_tokens, args.concurrent)
    return common.save(args.out, "structured", result, draw(result), report)
