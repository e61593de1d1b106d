"""The `tinyllm` command: generate, chat, info, perplexity (and serve, bench, worker).

Parsing the command line and checking what it names (flags, the model's path, the files of structured
output) imports no torch: `--help` and a user's mistake answer in a fraction of a second. A command imports
the engine only once it is sure to run."""

from __future__ import annotations

import json
import logging
import sys

from .cli_checks import (
    check_model_path,
    check_room,
    check_speculative,
    flag_names,
    max_tokens_of,
    read_prompt,
    read_structured,
    read_text,
)
from .cli_parser import build_parser as _build_parser
from .distributed.cli_args import parallel_from_args, run_launched_worker
from .errors import EngineDown, TinyLLMError
from .sampling.params import FIELDS, names_on

EXIT_CUT_SHORT = 1  # structured output ended by --max-tokens or the context, so not whole (cli_parser.EXIT_STATUS)
EXIT_USER_ERROR = 2
EXIT_ENGINE_DOWN = 3  # a tensor-parallel rank died or went silent
EXIT_INTERRUPTED = 130


def sampling(args, structured) -> dict:
    """The SamplingParams fields the flags give (max_tokens is set per prompt: see max_tokens_of)."""
    values = {name: getattr(args, dest) for name, dest in sampling_dests().items() if hasattr(args, dest)}
    return dict(values, structured=structured)


def sampling_dests() -> dict[str, str]:
    """SamplingParams field -> the parsed flag's attribute, for the flags the field table gives (and --logprobs)."""
    flags = dict(names_on("flag"), logprobs=FIELDS["logprobs"].flag)
    return {name: flag.removeprefix("--").replace("-", "_") for name, flag in flags.items()}


def make_params(args, structured, max_tokens: int):
    from .llm import sampling_params

    try:
        return sampling_params(None, dict(sampling(args, structured), max_tokens=max_tokens))
    except TinyLLMError as exc:
        raise TinyLLMError(flag_names(str(exc))) from None


def make_structured(args, text: str | None):
    """The constraint of --json-schema / --grammar / --regex / --json-object, or None."""
    from .grammar.structured import StructuredOutput

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
                return make(text)
            except TinyLLMError as exc:
                raise TinyLLMError(f"{flag} file {path!r}: {exc}") from None
    return None


def engine_kwargs(args) -> dict:
    spec = None
    if args.speculative is not None:
        from .speculative.proposer import SpeculativeConfig

        spec = SpeculativeConfig(
            method=args.speculative,
            num_draft_tokens=args.num_draft_tokens,
            draft_model=args.draft_model,
            draft_layers=args.draft_layers,
        )
    return dict(cache=args.cache, kv_dtype=args.kv_dtype, prefill_chunk=args.prefill_chunk, speculative=spec)


def check_common(args) -> str | None:
    """The checks every model command makes before loading anything; the structured-output file's text."""
    check_model_path(args.model)
    if hasattr(args, "speculative"):
        check_speculative(args)
    if hasattr(args, "json_schema"):
        if args.ignore_eos and (args.json_schema or args.grammar or args.regex or args.json_object):
            raise TinyLLMError(
                "--ignore-eos cannot be combined with structured output, whose end is an end-of-sequence token"
            )
        return read_structured(args)
    return None


def load(args):
    import torch

    from .llm import LLM

    if getattr(args, "threads", None):  # before loading: the kernels' pool takes torch's count when it starts
        torch.set_num_threads(args.threads)
    parallel = parallel_from_args(args) if hasattr(args, "tensor_parallel_size") else None
    options = dict(dtype=args.dtype, device=args.device, weights=args.weights, quantize=args.quantize)
    return LLM(args.model, parallel=parallel, ctx_size=getattr(args, "ctx_size", None), **options)


def cmd_generate(args) -> int:
    if (args.logprobs is not None or args.timings) and not args.json:
        raise TinyLLMError("--logprobs and --timings are fields of the --json output; add --json")
    prompt = read_prompt(args.prompt)
    text = check_common(args)
    llm = load(args)
    structured = make_structured(args, text)
    ids = llm.tokenizer.encode(prompt)
    context = llm.config.context_length
    check_room(len(ids), args.max_tokens, context)
    params = make_params(args, structured, max_tokens_of(args.max_tokens))
    kwargs = engine_kwargs(args)
    if args.json:
        g = llm.generate(ids, params=params, **kwargs)
        print(json.dumps(generation_json(g, args), ensure_ascii=False))
        return cut_short(args, g.finish_reason, g.text)
    pieces = []
    for piece in llm.stream(ids, params=params, **kwargs):
        pieces.append(piece)
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()
    return cut_short(args, None, "".join(pieces))


def cut_short(args, finish_reason: str | None, text: str) -> int:
    """EXIT_CUT_SHORT, with a line on stderr, when structured output ran out of tokens before it was whole,
    else 0. JSON tells by not parsing; a grammar's or regex's output by its finish reason, which a stream
    does not give (finish_reason None: not told)."""
    if args.json_object or args.json_schema is not None:
        if finish_reason not in (None, "length") or is_json(text):
            return 0
        what = "JSON was whole"
    elif (args.grammar is not None or args.regex is not None) and finish_reason == "length":
        what = f"model ended the output of {'--grammar' if args.grammar is not None else '--regex'}"
    else:
        return 0
    print(
        f"tinyllm: error: the output ran out of tokens (--max-tokens or the context) before the {what}; "
        "raise --max-tokens",
        file=sys.stderr,
    )
    return EXIT_CUT_SHORT


def is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def generation_json(g, args) -> dict:
    """What --json prints (its help lists the fields): per-token logprobs and times only when asked."""
    stats = {k: v for k, v in g.stats.items() if k not in ("token_times", "arrival")}
    out = {
        "text": g.text,
        "ids": g.ids,
        "finish_reason": g.finish_reason,
        "usage": g.usage,
        "timings": vars(g.timings),
        "stats": stats,
    }
    if args.logprobs is not None:
        out["logprobs"] = [
            {"token": t.token, "logprob": t.logprob, "entropy": t.entropy, "top": [list(pair) for pair in t.top]}
            for t in g.logprobs
        ]
    if args.timings:
        out["token_times_s"] = [t - g.stats["arrival"] for t in g.stats["token_times"]]
    return out


def cmd_chat(args) -> int:
    from .cli_chat import Chat

    text = check_common(args)
    llm = load(args)
    structured = make_structured(args, text)
    make_params(args, structured, max_tokens_of(args.max_tokens))  # a bad value fails before the first turn
    check_room(0, args.max_tokens, llm.config.context_length)
    chat = Chat(llm, lambda max_tokens: make_params(args, structured, max_tokens), engine_kwargs(args), args)
    return chat.run()


def cmd_info(args) -> int:
    check_model_path(args.model)
    info = load(args).info()
    if args.json:
        print(json.dumps(info))
        return 0
    for key, value in info.items():
        if key == "features" and not value:
            value = ["none beyond a plain Llama decoder"]
        if key == "integer_activations" and not value:
            value = ["none (float32 activations)"]
        if isinstance(value, list):
            value = ", ".join(map(str, value))
        print(f"{key:20s} {value}")
    return 0


def cmd_perplexity(args) -> int:
    text = read_text(args.file)
    check_model_path(args.model)
    from .perplexity import perplexity

    llm = load(args)
    ids = llm.tokenizer.encode(text)
    with WindowBar() as bar:
        result = perplexity(llm, ids, args.context, args.stride, on_window=bar, kv_dtype=args.kv_dtype)
    print(
        f"perplexity: {result.perplexity:.4f} (mean NLL {result.mean_nll:.6f} over {result.num_scored} tokens, "
        f"{len(result.windows)} windows of {result.context}, stride {result.stride}, {result.seconds:.1f} s)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_json(), f, indent=1)
    return 0


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


COMMANDS = {"generate": cmd_generate, "chat": cmd_chat, "info": cmd_info, "perplexity": cmd_perplexity}


def build_parser():
    return _build_parser(COMMANDS)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.func in COMMANDS.values():  # a lost rank reaches these as EngineDown, printed once below
        logging.getLogger("tinyllm.distributed").addHandler(logging.NullHandler())
    try:
        worker = run_launched_worker(args)  # torchrun started this process as a rank other than 0
        return args.func(args) if worker is None else worker
    except TinyLLMError as exc:
        print(f"tinyllm: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except EngineDown as exc:
        print(flush=True)  # end the streamed text's line
        print(f"tinyllm: error: {exc}", file=sys.stderr)
        return EXIT_ENGINE_DOWN
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
