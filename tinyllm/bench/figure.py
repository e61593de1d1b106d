"""The PNG every bench writes: matplotlib off-screen, plain tick labels, and a caption that says what the figure
is of — model, weights, threads, machine (CPU model, cores), date, the command that made it — and which peers
did not run and why. The caption is also stored in the PNG's Description field.

A bench's result may hold `peers`: {peer name: whether it ran}; the caption names each one that did not.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import textwrap
from collections.abc import Callable

FIGSIZE = (11.0, 4.5)  # inches, the drawing alone; the caption adds its own height
CAPTION_LINE_IN = 0.16  # inches per caption line at CAPTION_FONT
CAPTION_FONT = 7.5
CAPTION_WIDTH = 165  # characters per caption line at that font across the figure's width
INSTALL_BENCH = "pip install -e '.[bench]'"
UNSHOWN = {"out"}  # options that do not change the figure
KIND_OF = {"decode-tensor-parallel": "decode"}  # result files whose bench name is not the command's kind


def pyplot():
    """matplotlib.pyplot drawing to files only, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a window
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def write(out_dir: str, name: str, draw: Callable, result: dict) -> str | None:
    """Draw with draw(fig), caption it from result and save out_dir/name.png; without matplotlib, say so on
    stderr and return None."""
    plt = pyplot()
    if plt is None:
        print(f"matplotlib is not installed: no {name}.png written ({INSTALL_BENCH} installs it)", file=sys.stderr)
        return None
    fig = render(draw, result)
    try:
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"{name}.png")
        fig.savefig(path, dpi=110, metadata={"Description": caption(result)})
    finally:
        plt.close(fig)
    return path


def render(draw: Callable, result: dict):
    """The captioned Figure (the caller closes it)."""
    plt = pyplot()
    text = caption(result)
    lines = text.count("\n") + 1
    height = lines * CAPTION_LINE_IN + 0.15
    fig = plt.figure(figsize=(FIGSIZE[0], FIGSIZE[1] + height))
    draw(fig)
    for ax in fig.axes:
        plain_ticks(ax)
    fig.text(0.01, 0.04 / (FIGSIZE[1] + height), text, ha="left", va="bottom", fontsize=CAPTION_FONT, color="0.25")
    fig.tight_layout(rect=(0, height / (FIGSIZE[1] + height), 1, 1))
    return fig


def plain_ticks(ax) -> None:
    """Log axes written out (60, 0.05), never as 6×10^1, with enough labelled ticks for their span (every
    integer multiple of a power of ten under a factor of 4, 1-2-5 under 100, powers of ten beyond); minor
    ticks unlabelled. An axis whose ticks a bench set itself (its own values) keeps them."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    for axis, scale, limits in ((ax.xaxis, ax.get_xscale(), ax.get_xlim()), (ax.yaxis, ax.get_yscale(), ax.get_ylim())):
        if scale != "log":
            continue
        if not isinstance(axis.get_major_locator(), FixedLocator):
            low, high = sorted(limits)
            span = high / low if low > 0 else float("inf")
            subs = tuple(range(1, 10)) if span < 4 else (1.0, 2.0, 5.0) if span < 100 else (1.0,)
            axis.set_major_locator(LogLocator(base=10, subs=subs))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


# ---- drawing helpers

HATCHES = ("", "//", "..", "xx", "\\\\", "++")  # one per series, so series stay apart in greyscale too
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":")


def style(i: int) -> dict:
    """Marker and line style of the i-th line: markers shrink and alternate filled and hollow, lines alternate
    solid and dashed, so series that lie on one another stay visible."""
    return {
        "marker": MARKERS[i % len(MARKERS)],
        "linestyle": LINESTYLES[i % len(LINESTYLES)],
        "markersize": max(3.0, 7.0 - 1.2 * i),
        "fillstyle": "full" if i % 2 == 0 else "none",
    }


def grouped_bars(ax, groups: list[str], series: dict[str, list], fmt: str = "{:.1f}") -> None:
    """Bars side by side, one series per name (hatched apart, named in a legend when there are several; a
    single series gets a colour and hatch per group), each bar's value written on it; a None value's slot says
    "not run". Linear axis from 0."""
    names = list(series)
    width = 0.8 / max(1, len(names))
    absent = []
    for i, name in enumerate(names):
        xs = [j - 0.4 + width * (i + 0.5) for j in range(len(groups))]
        pairs = [(x, v) for x, v in zip(xs, series[name]) if v is not None]
        absent += [x for x, v in zip(xs, series[name]) if v is None]
        if len(names) > 1:
            look = {"label": name, "color": f"C{i % 10}", "hatch": HATCHES[i % len(HATCHES)]}
        else:
            present = [j for j, v in enumerate(series[name]) if v is not None]
            look = {"color": [f"C{j % 10}" for j in present], "hatch": [HATCHES[j % len(HATCHES)] for j in present]}
        bars = ax.bar([x for x, _ in pairs], [v for _, v in pairs], width, **look)
        ax.bar_label(bars, labels=[fmt.format(v) for _, v in pairs], fontsize=7, padding=1)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_xlim(-0.5, len(groups) - 0.5)  # every slot shown, an empty one too
    top = ax.get_ylim()[1] * 1.12  # room for the labels
    ax.set_ylim(0, top)
    for x in absent:
        ax.text(x, top * 0.02, "not run", ha="center", va="bottom", fontsize=8, color="0.35")
    if len(names) > 1:
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")


# ---- the caption


def caption(result: dict) -> str:
    """Lines: what ran on what and when; the command; the peers that did not run."""
    machine = result.get("machine") or {}
    options = result.get("options") or {}
    facts = [
        f"model {os.path.basename(str(result['model']).rstrip('/'))}" if result.get("model") else None,
        f"weights {weights(result.get('model'), options)}" if result.get("model") else None,
        _count(machine.get("torch_threads"), "thread"),
        f"{machine.get('cpu') or 'CPU'} ({_count(machine['cpu_count'], 'core')})" if machine.get("cpu_count") else None,
        str(machine["time"])[:16].replace("T", " ") if machine.get("time") else None,
    ]
    lines = [" · ".join(f for f in facts if f)]
    lines += textwrap.wrap(command(result), CAPTION_WIDTH, subsequent_indent="    ", break_on_hyphens=False)
    absent = absent_peers(result)
    if absent:
        lines += textwrap.wrap("not shown: " + "; ".join(absent), CAPTION_WIDTH, subsequent_indent="    ")
    return "\n".join(line for line in lines if line)


def _count(n: int | None, noun: str) -> str | None:
    return None if not n else f"{n} {noun}" + ("" if n == 1 else "s")


def weights(model: str | None, options: dict) -> str:
    """How the weights ran: GGUF blocks (native), with 8-bit activations, dequantized, or float."""
    is_gguf = str(model or "").endswith(".gguf")
    mode = options.get("weights") or ("native (GGUF blocks)" if is_gguf else "float")
    dtype = options.get("dtype") or "float32"
    quantize = f", quantized to {options['quantize']} at load" if options.get("quantize") else ""
    return f"{mode}{quantize}, {dtype} compute"


def command(result: dict) -> str:
    """The `tinyllm bench` command that gives these options: the kind, then each option that differs from its
    default (and --quick rather than the sizes it sets)."""
    kind = KIND_OF.get(result.get("bench"), result.get("bench", "?"))
    options = result.get("options") or {}
    parser = _kind_parser(kind)
    if parser is None:
        return f"tinyllm bench {kind}"
    quick = _quick_sizes(kind) if options.get("quick") else {}
    words = ["tinyllm", "bench", kind]
    for action in parser._actions:  # argparse keeps a parser's options there, in the order they were added
        if not action.option_strings or action.dest not in options or action.dest in UNSHOWN:
            continue
        value = options[action.dest]
        if value == action.default or (action.dest in quick and value == quick[action.dest]):
            continue
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction):
            words.append(flag)
        elif isinstance(value, (list, tuple)):
            words += [flag, *map(str, value)]
        elif value is not None:
            words += [flag, str(value)]
    return " ".join(words)


def _kind_parser(kind: str) -> argparse.ArgumentParser | None:
    from .cli import add_bench_command

    top = argparse.ArgumentParser(prog="tinyllm")
    add_bench_command(top.add_subparsers())
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            bench = action.choices["bench"]
            kinds = next(a for a in bench._actions if isinstance(a, argparse._SubParsersAction))
            return kinds.choices.get(kind)
    return None


def _quick_sizes(kind: str) -> dict:
    from .cli import BENCHES

    module = dict(BENCHES).get(kind)
    return getattr(importlib.import_module(module), "QUICK", {}) if module else {}


def absent_peers(result: dict) -> list[str]:
    """'llama.cpp (why)' for each peer in result['peers'] that did not run."""
    options = result.get("options") or {}
    return [
        f"{name} ({why_absent(name, result.get('model'), options)})"
        for name, ran in result.get("peers", {}).items()
        if not ran
    ]


def why_absent(peer: str, model: str | None, options: dict) -> str:
    if peer == "HF transformers":
        if options.get("no_reference"):
            return "--no-reference"
        if importlib.util.find_spec("transformers") is None:
            return f"transformers is not installed: {INSTALL_BENCH}"
        if "hf_batch" in options and not options["hf_batch"]:
            return "--hf-batch with no size"
        return "it could not load the model"
    if peer == "llama.cpp":
        if importlib.util.find_spec("llama_cpp") is None:
            return f"llama-cpp-python is not installed: {INSTALL_BENCH}"
        if not str(model or "").endswith(".gguf"):
            return "it runs GGUF files only"
        if "llamacpp" in options and not options["llamacpp"]:
            return "--llamacpp with no count"
    return "not run"
