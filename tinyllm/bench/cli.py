"""`tinyllm bench KIND`: each kind is a module with `add_args(parser)`, `run(args) -> dict` and, optionally,
`QUICK` (the sizes `--quick` uses). Adding a kind is one line in BENCHES.

A kind's module is imported only when that kind is on the command line (several import torch and the model
at the top), so `tinyllm --help` and `tinyllm bench --help` stay light; the kinds' help is their module
docstring's first paragraph, read from the source."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util

from ..cli_flags import add_model_args, add_threads_arg

# (name, module): the module's first docstring paragraph is the kind's help.
BENCHES = [
    ("load", "tinyllm.bench.load"),
    ("decode", "tinyllm.bench.decode"),
    ("throughput", "tinyllm.bench.throughput"),
    ("prefix", "tinyllm.bench.prefix"),
    ("serve", "tinyllm.bench.serve"),
    ("speculative", "tinyllm.bench.speculative"),
    ("step", "tinyllm.bench.step"),
    ("kernels", "tinyllm.bench.kernels"),
    ("structured", "tinyllm.bench.structured"),
]


def _common_args(p) -> None:
    p.add_argument("--out", default="bench-results", help="folder for the JSON and PNG files (default bench-results/)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run that finishes in seconds")
    p.add_argument("--no-reference", action="store_true", help="skip HF transformers (its columns stay empty)")
    p.add_argument("--seed", type=int, default=0, help="seed of the workload: prompts, lengths, arrivals (default 0)")
    add_threads_arg(p)
    add_model_args(p, device=False)


def module_doc(module_name: str) -> str:
    """A module's docstring, read from its source without importing it."""
    spec = importlib.util.find_spec(module_name)
    with open(spec.origin, encoding="utf-8") as f:
        return ast.get_docstring(ast.parse(f.read())) or ""


def add_kind_args(kind: argparse.ArgumentParser) -> None:
    """The kind's own flags, from its module (imported now); once per parser."""
    if kind.get_default("bench_run") is None:
        module = importlib.import_module(kind.get_default("bench_module"))
        module.add_args(kind)
        kind.set_defaults(bench_run=module)


class LazyKinds(argparse._SubParsersAction):
    """The kinds' subparsers; a kind's own flags are added (its module imported) once it is chosen."""

    def __call__(self, parser, namespace, values, option_string=None):
        kind = self._name_parser_map.get(values[0])
        if kind is not None:
            add_kind_args(kind)
        super().__call__(parser, namespace, values, option_string)


def add_bench_command(subparsers, lazy: bool = False) -> None:
    """`bench` and its kinds; lazy: each kind's module is imported only when the command line names it (the
    `tinyllm` command), else all of them now (whoever reads every kind's flags)."""
    bench = subparsers.add_parser(
        "bench", help="benchmarks beside HF transformers: " + ", ".join(name for name, _ in BENCHES)
    )
    action = LazyKinds if lazy else argparse._SubParsersAction
    kinds = bench.add_subparsers(dest="bench_kind", required=True, metavar="KIND", action=action)
    for name, module_name in BENCHES:
        doc = module_doc(module_name) or name
        p = kinds.add_parser(
            name,
            help=doc.split("\n\n")[0].replace("\n", " "),
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _common_args(p)
        p.set_defaults(func=cmd_bench, bench_module=module_name, bench_run=None)
        if not lazy:
            add_kind_args(p)


def cmd_bench(args) -> int:
    module = args.bench_run
    if args.quick:
        for key, value in getattr(module, "QUICK", {}).items():
            setattr(args, key, value)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    result = module.run(args)
    for key in ("json", "png"):
        if result.get(key):
            print(f"wrote {result[key]}")
    return 0
