"""The `tinyllm` command line: its commands and their flags, built without importing torch (the commands
import what they need when they run, in cli.py)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from . import __version__
from .cli_flags import (
    CHAT_TEMPERATURE,
    IntRange,
    Parser,
    add_ctx_size_arg,
    add_engine_args,
    add_kv_dtype_arg,
    add_model_args,
    add_sampling_args,
    add_speculative_args,
    add_structured_args,
    add_threads_arg,
)
from .cli_models import add_models_commands
from .distributed.cli_args import add_parallel_args, add_worker_command
from .sampling.params import FIELDS

EXIT_STATUS = """exit status: 0 done; 1 the output of --json-object or --json-schema is not whole JSON, as --max-tokens
or the context cut it short (with --json also a --grammar or --regex output the model had not ended); 2 a
mistake in the command or the files it names (one line on stderr); 3 the engine stopped: a tensor-parallel rank died
or went silent (one line on stderr naming it); 130 interrupted."""

CHAT_HELP = """Type a message and press Enter; the reply streams back. Ctrl-C stops a reply and returns to the
prompt; Ctrl-C or Ctrl-D at the prompt quits. Commands: /reset forgets the conversation (the system message
stays), /system TEXT sets the system message (/system alone removes it), /help lists them, /quit quits."""


def build_parser(commands: dict[str, Callable]) -> argparse.ArgumentParser:
    """The whole command line; `commands` maps generate, chat, info and perplexity to what runs them (list,
    pull and rm bring their own, from cli_models.py)."""
    parser = Parser(prog="tinyllm", description="Run Llama-family models exactly, on your machine.")
    parser.add_argument("--version", action="version", version=f"tinyllm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_generate(sub, commands["generate"])
    add_chat(sub, commands["chat"])
    add_info(sub, commands["info"])
    add_perplexity(sub, commands["perplexity"])
    add_models_commands(sub)
    add_worker_command(sub, add_model_args)
    add_optional_commands(sub)
    return parser


def command_parser(sub, name: str, help: str, description: str | None = None, epilog: str | None = None):
    return sub.add_parser(
        name,
        help=help,
        description=description or help[0].upper() + help[1:] + ".",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_generate(sub, run: Callable) -> None:
    g = command_parser(sub, "generate", "continue a prompt, streaming the text", epilog=EXIT_STATUS)
    g.add_argument("prompt", help="the text to continue ('-' reads it from stdin)")
    out = g.add_argument_group("output")
    out.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object when done instead of streaming the text: text, ids, finish_reason "
        "(stop or length), usage (prompt, completion and total tokens), timings (ttft_s, prefill_s, decode_s, "
        "total_s) and stats (cached tokens, preemptions, prefill and decode tokens/s, speculative counts)",
    )
    logprobs = FIELDS["logprobs"]
    out.add_argument(
        logprobs.flag,
        type=IntRange(logprobs.rule.lo, logprobs.rule.hi),
        default=logprobs.default,
        metavar="N",
        help=f"with --json: {logprobs.help}",
    )
    out.add_argument("--timings", action="store_true", help="with --json: each token's time since the call")
    add_model_args(g)
    add_ctx_size_arg(g)
    add_threads_arg(g)
    add_sampling_args(g, temperature=0.0)
    add_structured_args(g)
    add_engine_args(g)
    add_speculative_args(g)
    add_parallel_args(g)
    g.set_defaults(func=run)


def add_chat(sub, run: Callable) -> None:
    c = command_parser(
        sub, "chat", "an interactive chat using the model's chat template", description=CHAT_HELP, epilog=EXIT_STATUS
    )
    c.add_argument("--system", default=None, metavar="TEXT", help="the system message (default: none)")
    c.add_argument(
        "--hide-thinking",
        action="store_true",
        help="a model that reasons: show only its answers (default: its thinking too, dimmed on a terminal)",
    )
    add_model_args(c)
    add_ctx_size_arg(c)
    add_threads_arg(c)
    add_sampling_args(c, temperature=CHAT_TEMPERATURE)
    add_structured_args(c)
    add_engine_args(c)
    add_speculative_args(c)
    add_parallel_args(c)
    c.set_defaults(func=run)


def add_info(sub, run: Callable) -> None:
    i = command_parser(sub, "info", "describe a model: architecture, parameters, KV bytes per token, ...")
    i.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    add_model_args(i)
    i.set_defaults(func=run)


def add_perplexity(sub, run: Callable) -> None:
    pp = command_parser(sub, "perplexity", "the perplexity of a text file, scored in windows of N tokens")
    pp.add_argument("file", help="a UTF-8 text file")
    pp.add_argument(
        "--context", type=IntRange(2), default=None, help="tokens per window (default: min(512, the model's))"
    )
    pp.add_argument(
        "--stride",
        type=IntRange(1),
        default=None,
        help="tokens between window starts (default: the context); with a smaller stride each window's "
        "first context - stride tokens are context only",
    )
    pp.add_argument(
        "--json", default=None, metavar="OUT", help="write the result (per-window NLL too) as JSON (default: none)"
    )
    add_kv_dtype_arg(pp)
    add_model_args(pp)
    add_threads_arg(pp)
    add_parallel_args(pp)
    pp.set_defaults(func=run)


def add_optional_commands(sub) -> None:
    """serve and bench: their parsers import argparse alone; the web stack and each bench load when run."""
    from .bench.cli import add_bench_command
    from .server.cli import add_serve_command

    add_serve_command(sub)
    add_bench_command(sub, lazy=True)
