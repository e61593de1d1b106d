"""The `tinyllm` command, run as a user would: a subprocess, its stdout, stderr and exit code."""

import json
import os
import re
import subprocess
import sys

import pytest

from helpers.model_files import random_tiny_llama, write_gguf


def run(*args, input=None, timeout=120):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "tinyllm", *args], capture_output=True, text=True, input=input, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("cli") / "tiny.gguf")
    write_gguf(random_tiny_llama(31), path)
    return path


def test_generate_json_parses(tiny_gguf):
    r = run("generate", "the tin", "--model", tiny_gguf, "--max-tokens", "6", "--json", "--ignore-eos")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"text", "ids", "finish_reason", "usage", "timings"}
    assert len(out["ids"]) == 6 and out["finish_reason"] == "length"
    assert out["usage"] == {
        "prompt_tokens": out["usage"]["prompt_tokens"],
        "completion_tokens": 6,
        "total_tokens": out["usage"]["prompt_tokens"] + 6,
    }
    assert out["timings"]["ttft_s"] > 0


def test_cache_modes_print_the_same_greedy_text(tiny_gguf):
    texts = set()
    for mode in ("none", "contiguous", "paged"):
        r = run("generate", "the tin", "--model", tiny_gguf, "--max-tokens", "12", "--ignore-eos", "--cache", mode)
        assert r.returncode == 0, r.stderr
        texts.add(r.stdout)
    assert len(texts) == 1


def test_speculative_flags_print_the_same_text(tiny_gguf):
    base = ["generate", "the tin the tin the", "--model", tiny_gguf, "--max-tokens", "12", "--ignore-eos", "--json"]
    plain = json.loads(run(*base).stdout)
    for extra in (
        ["--speculative", "ngram", "--num-draft-tokens", "3"],
        ["--speculative", "draft", "--draft-layers", "1"],
    ):
        r = run(*base, *extra)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["ids"] == plain["ids"] and "acceptance_rate" in out["stats"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["generate", "hi", "--model", "TINY", "--speculative", "draft"], "exactly one"),
        (["generate", "hi", "--model", "TINY", "--draft-layers", "2"], "--speculative draft"),
        (["generate", "hi", "--model", "/no/such/model.gguf"], "does not exist"),
        (["generate", "", "--model", "TINY"], "empty"),
        (["generate", "hi", "--model", "TINY", "--top-p", "1.5"], "top_p"),
        (["generate", "hi", "--model", "TINY", "--prefill-chunk", "0"], "prefill_chunk"),
        (["info", "--model", "/tmp"], "config.json"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(tiny_gguf, args, message):
    r = run(*[tiny_gguf if a == "TINY" else a for a in args])
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_text("nope")
    r = run("generate", "hi", "--model", str(bad))
    assert r.returncode == 2 and "not a GGUF file" in r.stderr and "Traceback" not in r.stderr


def test_info_json(tiny_gguf):
    r = run("info", "--model", tiny_gguf, "--json")
    info = json.loads(r.stdout)
    assert info["layers"] == 3 and info["kv_heads"] == 2 and info["head_dim"] == 16
    assert info["kv_bytes_per_token"] == 2 * 3 * 2 * 16 * 4
    assert info["parameters"] > 0 and "byte-level BPE" in info["tokenizer"]


def test_info_table_prints_every_field(tiny_gguf):
    r = run("info", "--model", tiny_gguf)
    assert r.returncode == 0, r.stderr
    table = dict(line.split(None, 1) for line in r.stdout.splitlines())
    info = json.loads(run("info", "--model", tiny_gguf, "--json").stdout)
    assert set(table) == set(info)  # lists of ids print too, not only lists of words
    assert table["family"] == "llama" and table["features"] == "none beyond a plain Llama decoder"
    assert table["int8_activations"] == "none (float32 activations)"


def test_int8_activations_flag(tmp_path):
    path = str(tmp_path / "q.gguf")
    write_gguf(random_tiny_llama(31), path, quant_types={"weight": "Q4_1"})
    info = json.loads(run("info", "--model", path, "--weights", "native-int8", "--json").stdout)
    assert info["int8_activations"] == ["Q4_1"]
    r = run("generate", "the tin", "--model", path, "--weights", "native-int8", "--max-tokens", "4", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["usage"]["completion_tokens"] >= 1, r.stderr
    r = run("generate", "hi", "--model", path, "--weights", "int8")
    assert r.returncode == 2 and "native-int8" in r.stderr


def test_chat_streams_replies(tiny_gguf):
    r = run(
        "chat",
        "--model",
        tiny_gguf,
        "--max-tokens",
        "4",
        "--temperature",
        "0",
        "--ignore-eos",
        input="hello\nagain\n\n",
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert len(lines) == 3 and all(line.startswith("> ") for line in lines)  # two replies, then the end


@pytest.mark.slow
def test_default_model_cache_modes_agree():
    texts = set()
    for mode in ("none", "contiguous", "paged"):
        r = run("generate", "The three primary colors are", "--max-tokens", "24", "--cache", mode)
        assert r.returncode == 0, r.stderr
        texts.add(r.stdout)
    assert len(texts) == 1 and len(next(iter(texts)).strip()) > 10


def test_structured_output_flags(tiny_gguf, tmp_path):
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
        "required": ["n", "ok"],
        "additionalProperties": False,
    }
    (tmp_path / "s.json").write_text(json.dumps(schema))
    (tmp_path / "g.gbnf").write_text('root ::= "tin" ("," "tin")*')
    base = [
        "generate",
        "the tin",
        "--model",
        tiny_gguf,
        "--max-tokens",
        "40",
        "--json",
        "--temperature",
        "1",
        "--seed",
        "3",
    ]
    out = json.loads(run(*base, "--json-schema", str(tmp_path / "s.json")).stdout)
    value = json.loads(out["text"])
    assert out["finish_reason"] == "stop" and set(value) == {"n", "ok"} and 0 <= value["n"] <= 99
    out = json.loads(run(*base, "--regex", "[a-e]{3,5}").stdout)
    assert out["finish_reason"] == "stop" and re.fullmatch("[a-e]{3,5}", out["text"])
    out = json.loads(run(*base, "--grammar", str(tmp_path / "g.gbnf")).stdout)
    assert re.fullmatch("tin(,tin)*", out["text"])
    r = run(*base, "--regex", "a(")
    assert r.returncode == 2 and "the regex cannot be compiled" in r.stderr and "Traceback" not in r.stderr
    r = run(*base, "--json-schema", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "--json-schema file" in r.stderr
    (tmp_path / "not.json").write_text("root: {")
    (tmp_path / "bytes.gbnf").write_bytes(b"\xff\xfe")
    r = run(*base, "--json-schema", str(tmp_path / "not.json"))
    assert r.returncode == 2 and f"--json-schema file {str(tmp_path / 'not.json')!r}: the json_schema" in r.stderr
    r = run(*base, "--grammar", str(tmp_path / "bytes.gbnf"))
    assert r.returncode == 2 and "is not UTF-8 text" in r.stderr and "Traceback" not in r.stderr


def test_serve_takes_the_weight_options():
    from tinyllm.cli import build_parser

    args = build_parser().parse_args(["serve", "--weights", "dequantized", "--quantize", "int8"])
    assert (args.weights, args.quantize) == ("dequantized", "int8")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--weights", "float"])
