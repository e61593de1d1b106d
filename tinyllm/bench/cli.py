"""`tinyllm bench KIND`: each kind is a module with `add_args(parser)`, `run(args) -> dict` and, optionally,
`QUICK` (the sizes `--quick` uses). Adding a kind is one line in BENCHES."""

from __future__ import annotations

import importlib
import inspect

# (name, module): the module's first docstring line is the kind's help.
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
    p.add_argument("--model", default=None, help="a .gguf file or Hugging Face folder (default: SmolLM2-135M-Instruct)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run that finishes in seconds")
    p.add_argument("--no-reference", action="store_true", help="skip HF transformers (its columns stay empty)")
    p.add_argument("--seed", type=int, default=0, help="seed of the workload (prompts, lengths, arrivals)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    p.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16", "float16"],
        help="compute dtype of both engines (default float32)",
    )
    p.add_argument(
        "--weights",
        default=None,
        choices=["native", "native-int8", "dequantized"],
        help="our weights: GGUF blocks kept as blocks (native, default), the same with 8-bit activations "
        "(native-int8), or expanded to float",
    )
    p.add_argument("--quantize", default=None, choices=["int8", "int4"], help="quantize a float model at load")


def add_bench_command(subparsers) -> None:
    bench = subparsers.add_parser(
        "bench", help="benchmarks beside HF transformers: " + ", ".join(name for name, _ in BENCHES)
    )
    kinds = bench.add_subparsers(dest="bench_kind", required=True)
    for name, module_name in BENCHES:
        module = importlib.import_module(module_name)
        doc = inspect.getdoc(module) or name
        p = kinds.add_parser(name, help=doc.split("\n\n")[0].replace("\n", " "), description=doc)
        _common_args(p)
        module.add_args(p)
        p.set_defaults(func=cmd_bench, bench_run=module)


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
