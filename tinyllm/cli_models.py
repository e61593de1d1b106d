"""`tinyllm list`, `pull` and `rm`: the models this machine has by name, a Hugging Face id fetched into the
models directory, a model removed from it. No torch: each reads file headers and config.json only."""

from __future__ import annotations

import argparse
import sys
import warnings

NAME_RULE = """A model's name comes from its path in the models directory ($TINYLLM_MODELS, default
~/.cache/tinyllm/models): DIR/A.gguf is A, DIR/A/B.gguf is A:B, DIR/A/B/C.gguf is A/B:C, a Hugging Face folder
DIR/A/B/ is A/B. smollm2:135m is the default model. --model takes any of these names."""

HUB_IDS = """A Hugging Face id is org/name (a safetensors repo), org/name:QUANT (the repo's .gguf whose file name
holds QUANT, e.g. Q4_K_M) or org/name/file.gguf; a GGUF repo named without QUANT gives its only .gguf, or its
Q4_K_M one. Files come through the Hugging Face cache (HF_HOME); with HF_HUB_OFFLINE=1 only the cache is read."""


def add_models_commands(sub) -> None:
    for name, help, run, description in (
        ("list", "the models this machine has, by name", cmd_list, NAME_RULE),
        ("pull", "download a Hugging Face model into the models directory", cmd_pull, HUB_IDS),
        ("rm", "remove a model from the models directory", cmd_rm, NAME_RULE),
    ):
        p = sub.add_parser(
            name,
            help=help,
            description=f"{help[0].upper()}{help[1:]}.\n\n{description}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name != "list":
            p.add_argument(
                "name", help="a Hugging Face id or a short name" if name == "pull" else "a name from tinyllm list"
            )
        p.set_defaults(func=run)


def human_size(num_bytes: int) -> str:
    """Decimal units, as `ollama list` prints sizes: 812 B, 161.7 KB, 98.4 MB, 4.9 GB."""
    size, unit = float(num_bytes), "B"
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            break
        size /= 1000
    return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"


def table_rows() -> list[tuple[str, str, str, str, str]]:
    """(name, family, format, size, context) of each stored model, as `tinyllm list` prints them."""
    from .loading.file_summary import summary_of
    from .loading.model_store import stored_models

    rows = []
    for m in stored_models():
        facts = summary_of(m.path)
        family, context = facts["family"], facts["context_length"]
        rows.append((m.name, family if family != "unknown" else "?", m.format, human_size(m.size), str(context or "?")))
    return rows


def cmd_list(args) -> int:
    from .loading.model_store import models_dir

    header = ("NAME", "FAMILY", "FORMAT", "SIZE", "CONTEXT")
    with warnings.catch_warnings(record=True) as caught:  # skipped files: one line each, not a warning's source
        warnings.simplefilter("always")
        rows = [header, *table_rows()]
    for w in caught:
        print(f"tinyllm: warning: {w.message}", file=sys.stderr)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if len(rows) == 1:
        print(f"no models: the default model is not installed and {models_dir()} holds none")
    return 0


def cmd_pull(args) -> int:
    from .loading.model_store import short_name_target
    from .loading.model_store_edits import pull

    is_short, target = short_name_target(args.name)
    if is_short and target is None:
        from .loading.default_model import default_model_path

        print(f"{args.name} is the default model, installed at {default_model_path()}")
        return 0
    name, path = pull(args.name)
    print(f"pulled {name} into {path}")
    return 0


def cmd_rm(args) -> int:
    from .loading.model_store_edits import remove

    path = remove(args.name)
    print(f"removed {args.name} ({path})")
    return 0
