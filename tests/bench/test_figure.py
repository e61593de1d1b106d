"""The bench figures: each carries a caption (model, weights, threads, machine, date, command, absent peers),
log axes read as plain numbers, prefix.png draws counts on linear axes, and a missing matplotlib is said
on stderr rather than passed over. Figures are checked through matplotlib's objects, never pixels."""

import json
import os
import sys

import pytest

from helpers.model_files import random_tiny_llama, write_hf_folder
from tinyllm.bench import figure, load, prefix
from tinyllm.cli import main

pytest.importorskip("matplotlib")

MACHINE = {"torch_threads": 2, "cpu": "Some CPU 9000", "cpu_count": 2, "time": "2026-12-02T18:30:00+0000"}


def result_of(kind: str, argv: list[str], **extra) -> dict:
    """A result as a bench writes it: its options from parsing argv as `tinyllm bench KIND ARGV` would."""
    options = vars(figure._kind_parser(kind).parse_args(argv))
    return {"bench": kind, "model": "/models/m.Q4_1.gguf", "machine": dict(MACHINE), "options": options, **extra}


def texts(fig) -> str:
    return "\n".join(t.get_text() for t in fig.texts + [t for ax in fig.axes for t in ax.texts])


def empty(fig):
    fig.add_subplot(1, 1, 1).plot([1, 2], [3, 4])


def test_the_caption_names_model_weights_threads_machine_date_and_command(tmp_path):
    r = result_of("prefix", ["--requests", "16", "--suffix-range", "8", "24", "--out", "x"])
    fig = figure.render(empty, r)
    try:
        caption = texts(fig)
    finally:
        fig.clf()
    for part in ("model m.Q4_1.gguf", "weights native (GGUF blocks), float32 compute", "2 threads"):
        assert part in caption
    assert "Some CPU 9000 (2 cores)" in caption and "2026-12-02 18:30" in caption
    assert "tinyllm bench prefix --requests 16 --suffix-range 8 24\n" in caption + "\n"  # --out changes no figure
    path = figure.write(str(tmp_path), "prefix", empty, r)
    from PIL import Image

    with Image.open(path) as png:  # the written file carries the caption too
        assert png.text["Description"] == figure.caption(r)


def test_the_command_is_the_kind_and_the_options_that_differ_from_their_defaults():
    assert figure.command(result_of("throughput", [])) == "tinyllm bench throughput"
    r = result_of("throughput", ["--concurrency", "1", "32", "--weights", "native-int8", "--rates", "--cold-pool"])
    expected = "tinyllm bench throughput --weights native-int8 --concurrency 1 32 --rates --cold-pool"
    assert figure.command(r) == expected
    quick = result_of("prefix", ["--quick", "--threads", "1"])
    quick["options"].update(prefix.QUICK)  # as `tinyllm bench` applies --quick's sizes
    assert figure.command(quick) == "tinyllm bench prefix --quick --threads 1"


def test_peers_that_did_not_run_are_named_with_the_reason(monkeypatch):
    real = figure.importlib.util.find_spec
    monkeypatch.setattr(figure.importlib.util, "find_spec", lambda name: None if name == "llama_cpp" else real(name))
    r = result_of("decode", ["--no-reference"], peers={"HF transformers": False, "llama.cpp": False})
    caption = figure.caption(r)
    assert "not shown: HF transformers (--no-reference); llama.cpp (llama-cpp-python is not installed" in caption
    r["peers"] = {"HF transformers": True, "llama.cpp": True}
    assert "not shown" not in figure.caption(r)


def test_log_axes_read_as_plain_numbers():
    def log_plot(fig):
        ax = fig.add_subplot(1, 1, 1)
        ax.plot([1, 2], [55, 70])  # less than a decade: matplotlib would label minor ticks 6×10^1
        ax.set_yscale("log")

    fig = figure.render(log_plot, result_of("decode", []))
    try:
        fig.canvas.draw()
        ax = fig.axes[0]
        labels = [t.get_text() for t in ax.get_yticklabels(minor=False) + ax.get_yticklabels(minor=True)]
    finally:
        fig.clf()
    assert not any("times" in s or "^" in s for s in labels)
    assert all(s == "" or float(s) > 0 for s in labels)


def test_without_matplotlib_a_bench_says_it_wrote_no_figure(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    assert figure.write(str(tmp_path), "load", empty, result_of("load", [])) is None
    assert "matplotlib is not installed: no load.png written" in capsys.readouterr().err
    assert not os.listdir(tmp_path)


@pytest.fixture(scope="module")
def prefix_result(tmp_path_factory):
    folder = write_hf_folder(random_tiny_llama(3, max_position_embeddings=512), str(tmp_path_factory.mktemp("hf")))
    out = tmp_path_factory.mktemp("out")
    assert main(["bench", "prefix", "--quick", "--model", folder, "--out", str(out)]) == 0
    with open(out / "prefix.json") as f:
        return json.load(f)


@pytest.mark.slow
def test_prefix_draws_counts_on_linear_axes_and_each_run_apart(prefix_result):
    r = prefix_result
    for run in ("sharing", "no_sharing"):  # the step-by-step record the figure draws
        timeline = r[run]["timeline"]
        assert max(u for _, _, u in timeline) == r[run]["peak_blocks_used"]
        assert max(n for _, n, _ in timeline) == r[run]["peak_running"] >= 1
    fig = figure.render(prefix.draw(r), r)
    try:
        held_ax, per_ax, time_ax = fig.axes
        assert {ax.get_yscale() for ax in fig.axes} == {"linear"} and held_ax.get_xscale() == "linear"
        lines = [line for line in held_ax.get_lines() if len(line.get_xdata()) > 2]
        assert len(lines) == 2 and lines[0].get_linestyle() != lines[1].get_linestyle()
        heights = [p.get_height() for p in per_ax.patches]
        assert heights == pytest.approx([r[k]["blocks_per_running_request"] for k in ("sharing", "no_sharing")])
        assert len({p.get_hatch() for p in time_ax.patches}) == 2  # the two runs' bars differ beyond colour
        assert "running" in texts(fig) and "without sharing" in texts(fig)
    finally:
        fig.clf()


def test_load_names_an_absent_peer_on_its_panel(monkeypatch):
    r = result_of("load", [], peers={"HF transformers": True, "llama.cpp": False})
    r.update(
        load={
            "ours_s": 0.3,
            "reference_s": 1.2,
            "llamacpp_s": None,
            "ours_rss_added": 2**27,
            "llamacpp_rss_added": None,
        },
        prefill={"prompt_tokens": 512, "ours_tokens_per_s": 600.0, "reference_tokens_per_s": 300.0},
        uncached_decode={"new_tokens": 32, "ours_tokens_per_s": 20.0, "reference_tokens_per_s": 10.0},
    )
    fig = figure.render(load.draw(r), r)
    try:
        # llama.cpp's load time and its memory (the caption's reason depends on what is installed)
        assert texts(fig).split("\n").count("not run") == 2
        assert "llama.cpp" in [t.get_text() for t in fig.axes[0].get_xticklabels()]
    finally:
        fig.clf()
