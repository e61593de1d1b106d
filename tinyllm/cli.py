"""The `tinyllm` command: generate, chat, info (and bench, serve where installed)."""

from __future__ import annotations

import argparse
import json
import sys

from .distributed.cli_args import add_parallel_args, add_worker_command, parallel_from_args, run_launched_worker
from .errors import TinyLLMError


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", default=None, help="a .gguf file or a Hugging Face folder (default: SmolLM2-135M-Instruct)"
    )
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"], help="compute dtype")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, ...)")
    p.add_argument(
        "--weights",
        default=None,
        choices=["native", "native-int8", "dequantized"],
        help="keep GGUF block formats as blocks (native, the default on the CPU) or expand them to float; "
        "native-int8 also quantizes activations to 8 bits per 32 as llama.cpp does (faster, not exact)",
    )
    p.add_argument(
        "--quantize",
        default=None,
        choices=["int8", "int4"],
        help="quantize a float model's weights at load (int8: Q8_0, int4: Q4_1; groups of 32)",
    )


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=None, help="0 = greedy (default: 0 for generate, 0.7 for chat)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--presence-penalty", type=float, default=0.0)
    p.add_argument("--frequency-penalty", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--logprobs", type=int, default=None, help="report the top-N alternatives per token")
    p.add_argument(
        "--cache",
        default="paged",
        choices=["paged", "contiguous", "none"],
        help="paged: the engine (default); contiguous / none: the reference loop, with a plain KV "
        "cache or recomputing everything",
    )
    p.add_argument(
        "--kv-dtype",
        default=None,
        choices=["float32", "float16", "bfloat16"],
        help="KV cache dtype (default: the model's)",
    )
    p.add_argument("--prefill-chunk", type=int, default=None, help="tokens per engine step (default 2048)")
    p.add_argument(
        "--speculative",
        default=None,
        choices=["ngram", "draft"],
        help="draft tokens by prompt lookup or with a draft model, verify them in one forward",
    )
    p.add_argument("--num-draft-tokens", type=int, default=4)
    p.add_argument("--draft-model", default=None, help="a smaller model sharing the tokenizer")
    p.add_argument("--draft-layers", type=int, default=None, help="self-draft from the target's first N layers")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--json-schema", metavar="FILE", default=None, help="the output is JSON matching this schema")
    shape.add_argument("--grammar", metavar="FILE", default=None, help="the output follows this Lark or GBNF grammar")
    shape.add_argument("--regex", metavar="PATTERN", default=None, help="the output fully matches this regex")
    shape.add_argument("--json-object", action="store_true", help="the output is a JSON object")


def _sampling(args, default_temperature: float) -> dict:
    return dict(
        max_tokens=args.max_tokens,
        temperature=default_temperature if args.temperature is None else args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repetition_penalty=args.repetition_penalty,
        presence_penalty=args.presence_penalty,
        frequency_penalty=args.frequency_penalty,
        seed=args.seed,
        stop=tuple(args.stop),
        ignore_eos=args.ignore_eos,
        logprobs=args.logprobs,
        structured=_structured(args),
    )


def _structured(args):
    """The constraint named by --json-schema / --grammar / --regex / --json-object, or None."""
    from .sampling.structured import StructuredOutput

    if args.json_object:
        return StructuredOutput.json_object()
    if args.regex is not None:
        return StructuredOutput.regex(args.regex)
    for flag, path, make in (
        ("--json-schema", args.json_schema, StructuredOutput.json_schema),
        ("--grammar", args.grammar, StructuredOutput.grammar),
    ):
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except OSError as exc:
                raise TinyLLMError(f"{flag} file {path!r} cannot be read ({exc.strerror})") from None
            except UnicodeDecodeError:
                raise TinyLLMError(f"{flag} file {path!r} is not UTF-8 text") from None
            try:
                return make(text)
            except TinyLLMError as exc:
                raise TinyLLMError(f"{flag} file {path!r}: {exc}") from None
    return None


def _engine_kwargs(args) -> dict:
    spec = None
    if args.speculative is not None:
        from .speculative.proposer import SpeculativeConfig

        spec = SpeculativeConfig(
            method=args.speculative,
            num_draft_tokens=args.num_draft_tokens,
            draft_model=args.draft_model,
            draft_layers=args.draft_layers,
        )
    elif args.draft_model is not None or args.draft_layers is not None:
        raise TinyLLMError("--draft-model and --draft-layers need --speculative draft")
    return dict(cache=args.cache, kv_dtype=args.kv_dtype, prefill_chunk=args.prefill_chunk, speculative=spec)


def _load(args):
    from .llm import LLM

    parallel = parallel_from_args(args) if hasattr(args, "tensor_parallel_size") else None
    options = dict(dtype=args.dtype, device=args.device, weights=args.weights, quantize=args.quantize)
    return LLM(args.model, parallel=parallel, **options)


def cmd_generate(args) -> int:
    from .llm import sampling_params

    if not args.prompt:
        raise TinyLLMError("prompt is empty; expected some text to continue")
    params = sampling_params(None, _sampling(args, 0.0))
    kwargs = _engine_kwargs(args)
    llm = _load(args)
    if args.json:
        g = llm.generate(args.prompt, params=params, **kwargs)
        print(json.dumps(_generation_json(g), ensure_ascii=False))
        return 0
    for piece in llm.stream(args.prompt, params=params, **kwargs):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


def _generation_json(g) -> dict:
    out = {
        "text": g.text,
        "ids": g.ids,
        "finish_reason": g.finish_reason,
        "usage": g.usage,
        "timings": vars(g.timings),
        "stats": g.stats,
    }
    if g.logprobs and g.logprobs[0].top is not None:
        out["logprobs"] = [
            {"token": t.token, "logprob": t.logprob, "top": t.top, "entropy": t.entropy} for t in g.logprobs
        ]
    return out


def cmd_chat(args) -> int:
    from .llm import sampling_params

    params = sampling_params(None, _sampling(args, 0.7))
    kwargs = _engine_kwargs(args)
    llm = _load(args)
    messages = [{"role": "system", "content": args.system}] if args.system else []
    print("Chatting with the model; an empty line or Ctrl-D ends.", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            break
        if not line.strip():
            break
        messages.append({"role": "user", "content": line})
        reply = []
        for piece in llm.chat(messages, stream=True, params=params, **kwargs):
            reply.append(piece)
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\n")
        messages.append({"role": "assistant", "content": "".join(reply)})
    return 0


def cmd_info(args) -> int:
    info = _load(args).info()
    if args.json:
        print(json.dumps(info))
    else:
        for key, value in info.items():
            if key == "features" and not value:
                value = ["none beyond a plain Llama decoder"]
            if key == "int8_activations" and not value:
                value = ["none (float32 activations)"]
            if isinstance(value, list):
                value = ", ".join(map(str, value))
            print(f"{key:20s} {value}")
    return 0


def cmd_perplexity(args) -> int:
    from .perplexity import perplexity

    text = _read_text(args.file)
    llm = _load(args)
    ids = llm.tokenizer.encode(text)
    with WindowBar() as bar:
        result = perplexity(llm, ids, args.context, args.stride, on_window=bar)
    print(
        f"perplexity: {result.perplexity:.4f} (mean NLL {result.mean_nll:.6f} over {result.num_scored} tokens, "
        f"{len(result.windows)} windows of {result.context}, stride {result.stride}, {result.seconds:.1f} s)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_json(), f, indent=1)
    return 0


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise TinyLLMError(f"text file {path!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TinyLLMError(f"cannot read {path!r} as UTF-8 text: {exc}") from None
    if not text.strip():
        raise TinyLLMError(f"text file {path!r} is empty; expected some text to score")
    return text


class WindowBar:
    """A tqdm bar over the scored windows on a terminal, with the running perplexity (silent elsewhere)."""

    def __init__(self):
        self.bar, self.nll, self.count = None, 0.0, 0

    def __enter__(self):
        return self

    def __call__(self, score, num_windows: int) -> None:
        import math

        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(
                total=num_windows, desc="scoring", unit="window", leave=False, disable=not sys.stderr.isatty()
            )
        self.nll, self.count = self.nll + score.nll, self.count + score.window.num_scored
        self.bar.set_postfix(ppl=f"{math.exp(self.nll / self.count):.3f}", refresh=False)
        self.bar.update(1)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tinyllm", description="Run Llama-family models exactly, on your machine.")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="continue a prompt, streaming the text")
    g.add_argument("prompt")
    g.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    _add_model_args(g)
    _add_sampling_args(g)
    add_parallel_args(g)
    g.set_defaults(func=cmd_generate)
    c = sub.add_parser("chat", help="an interactive chat using the model's chat template")
    c.add_argument("--system", default=None, help="a system message")
    _add_model_args(c)
    _add_sampling_args(c)
    add_parallel_args(c)
    c.set_defaults(func=cmd_chat)
    i = sub.add_parser("info", help="describe a model: architecture, parameters, KV bytes per token, ...")
    i.add_argument("--json", action="store_true")
    _add_model_args(i)
    i.set_defaults(func=cmd_info)
    pp = sub.add_parser("perplexity", help="the perplexity of a text file, scored in windows of N tokens")
    pp.add_argument("file", help="a UTF-8 text file")
    pp.add_argument("--context", type=int, default=None, help="tokens per window (default: min(512, the model's))")
    pp.add_argument(
        "--stride",
        type=int,
        default=None,
        help="tokens between window starts (default: the context); with a smaller stride each window's "
        "first context - stride tokens are context only",
    )
    pp.add_argument("--json", default=None, metavar="OUT", help="write the result (per-window NLL too) as JSON")
    _add_model_args(pp)
    add_parallel_args(pp)
    pp.set_defaults(func=cmd_perplexity)
    add_worker_command(sub, _add_model_args)
    _add_optional_commands(sub)
    return parser


def _add_optional_commands(sub) -> None:
    """Commands whose modules may bring heavier imports register themselves here."""
    from .bench.cli import add_bench_command  # each bench module imports torch only when it runs
    from .server.cli import add_serve_command  # argparse only: the web stack loads when `serve` runs

    add_serve_command(sub)
    add_bench_command(sub)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        worker = run_launched_worker(args)  # torchrun started this process as a rank other than 0
        return args.func(args) if worker is None else worker
    except TinyLLMError as exc:
        print(f"tinyllm: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
