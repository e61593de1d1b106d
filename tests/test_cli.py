"""The `tinyllm` command, run as a user would: a subprocess, its stdout, stderr and exit code."""

import json
import os
import re
import subprocess
import sys

import pytest

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm.bench.cli import BENCHES


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_cache_modes_print_the_same_greedy_text(tiny_gguf):
    texts = set()
    for mode in ("none", "contiguous", "paged"):
        r = run("generate", "the tin", "--model", tiny_gguf, "--max-tokens", "12", "--ignore-eos", "--cache", mode)
        assert r.returncode == 0, r.stderr
        texts.add(r.stdout)
    assert len(texts) == 1


@pytest.mark.slow
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
        (["generate", "hi", "--model", "TINY", "--draft-layers", "2"], "--draft-layers needs --speculative draft"),
        (["generate", "hi", "--model", "/no/such/model.gguf"], "does not exist"),
        (["generate", "", "--model", "TINY"], "empty"),
        (["generate", "hi", "--model", "TINY", "--top-p", "1.5"], "--top-p must be in (0, 1], got 1.5"),
        (["generate", "hi", "--model", "TINY", "--prefill-chunk", "0"], "--prefill-chunk must be at least 1"),
        (["generate", "hi", "--model", "TINY", "--max-tokens", "0"], "--max-tokens must be at least 1, got 0"),
        (["generate", "hi", "--model", "TINY", "--logprobs", "2"], "add --json"),
        (["generate", "hi", "--model", "TINY", "--regex", "a", "--ignore-eos"], "--ignore-eos cannot be combined"),
        (
            ["generate", "hi", "--model", "TINY", "--speculative", "draft", "--draft-model", "/no/such"],
            "--draft-model:",
        ),
        (["generate", "hi", "--model", "TINY", "--bogus"], "unrecognized arguments: --bogus"),
        (["info", "--model", "/tmp"], "config.json"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(tiny_gguf, args, message):
    r = run(*[tiny_gguf if a == "TINY" else a for a in args])
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("cut", [False, True])
def test_not_a_gguf_file(tmp_path, tiny_gguf, cut):
    bad = tmp_path / "x.gguf"
    if cut:
        bad.write_bytes(open(tiny_gguf, "rb").read()[:200])
    else:
        bad.write_text("nope")
    r = run("generate", "hi", "--model", str(bad))
    says = "is cut short: its header says" if cut else "is not a GGUF file (it starts with the text 'nope')"
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr


@pytest.mark.slow
def test_info_json(tiny_gguf):
    r = run("info", "--model", tiny_gguf, "--json")
    info = json.loads(r.stdout)
    assert info["layers"] == 3 and info["kv_heads"] == 2 and info["head_dim"] == 16
    assert info["kv_bytes_per_token"] == 2 * 3 * 2 * 16 * 4
    by_dtype = info["kv_bytes_per_token_by_kv_dtype"]
    assert by_dtype == {"float32": 768, "float16": 384, "bfloat16": 384, "q8_0": int(192 * (1 + 2 / 32))}
    assert info["parameters"] > 0 and "byte-level BPE" in info["tokenizer"]


@pytest.mark.slow
def test_info_table_prints_every_field(tiny_gguf):
    r = run("info", "--model", tiny_gguf)
    assert r.returncode == 0, r.stderr
    table = dict(line.split(None, 1) for line in r.stdout.splitlines())
    info = json.loads(run("info", "--model", tiny_gguf, "--json").stdout)
    assert set(table) == set(info)  # lists of ids print too, not only lists of words
    assert table["family"] == "llama" and table["features"] == "none beyond a plain Llama decoder"
    assert table["integer_activations"] == "none (float32 activations)" and info["activation_bits"] == 32


@pytest.mark.slow
def test_int8_activations_flag(tmp_path):
    path = str(tmp_path / "q.gguf")
    write_gguf(random_tiny_llama(31), path, quant_types={"weight": "Q4_1"})
    for weights, bits in (("native-int8", 8), ("native-int24", 24), ("native", 32)):
        info = json.loads(run("info", "--model", path, "--weights", weights, "--json").stdout)
        assert info["integer_activations"] == ([] if bits == 32 else ["Q4_1"]) and info["activation_bits"] == bits
    r = run("generate", "the tin", "--model", path, "--weights", "native-int8", "--max-tokens", "4", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["usage"]["completion_tokens"] >= 1, r.stderr
    r = run("generate", "hi", "--model", path, "--weights", "int8")
    assert r.returncode == 2 and "native-int8" in r.stderr


@pytest.mark.slow
def test_default_model_cache_modes_agree():
    texts = set()
    for mode in ("none", "contiguous", "paged"):
        r = run("generate", "The three primary colors are", "--max-tokens", "24", "--cache", mode)
        assert r.returncode == 0, r.stderr
        texts.add(r.stdout)
    assert len(texts) == 1 and len(next(iter(texts)).strip()) > 10


@pytest.mark.slow
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


def test_serve_takes_a_kv_dtype():
    from tinyllm.cli import build_parser
    from tinyllm.server.cli import engine_options

    assert engine_options(build_parser().parse_args(["serve", "--kv-dtype", "q8_0"]))["kv_dtype"] == "q8_0"
    assert engine_options(build_parser().parse_args(["serve"]))["kv_dtype"] is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--kv-dtype", "int4"])


NO_TORCH = """
import sys
from tinyllm.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(code, sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""


@pytest.mark.parametrize(
    "args, code",
    [
        (["--help"], 0),
        (["--version"], 0),
        *[([command, "--help"], 0) for command in ("generate", "chat", "info", "perplexity", "serve", "worker")],
        (["bench", "--help"], 0),
        *[(["bench", kind, "--help"], 0) for kind, _ in BENCHES],
        (["generate"], 2),
        (["generate", "hi", "--top-k", "many"], 2),
        (["generate", "hi", "--model", "/no/such/model.gguf"], 2),
        (["generate", "hi", "--model", "TINY", "--json-schema", "/no/such/schema.json"], 2),
        (["chat", "--model", "/no/such/folder/"], 2),
        (["perplexity", "/no/such/text.txt"], 2),
        (["bench", "decode", "--new-tokens", "0"], 2),
        (["bench", "throughput", "--concurrency", "4", "-3"], 2),
    ],
)
def test_help_and_user_errors_import_no_torch(tiny_gguf, args, code):
    argv = [tiny_gguf if a == "TINY" else a for a in args]
    r = subprocess.run([sys.executable, "-c", NO_TORCH, *argv], capture_output=True, text=True, timeout=60)
    assert r.stdout.splitlines()[-1] == f"{code} []", r.stdout[-500:] + r.stderr
    if code == 2:
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


@pytest.mark.slow
def test_chat_max_tokens_past_the_context_names_the_context(tiny_gguf):
    r = run("chat", "--model", tiny_gguf, "--max-tokens", "99999")
    assert r.returncode == 2
    assert r.stderr == "tinyllm: error: --max-tokens is 99999, more than the model's context length of 128 tokens\n"


def generate_json(tiny_gguf, *args):
    r = run("generate", "the tin", "--model", tiny_gguf, "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.slow
def test_stop_takes_backslash_escapes_as_the_shell_passes_them(tiny_gguf):
    # the regex makes the output "ab", a blank line, "cd": --stop '\n\n' (a backslash and an n, twice) cuts it
    out = generate_json(tiny_gguf, "--regex", "ab\n\ncd", "--stop", "\\n\\n")
    assert out["text"] == "ab" and out["finish_reason"] == "stop"
    out = generate_json(tiny_gguf, "--regex", "ab\n\ncd", "--stop", "\\\\n")  # an escaped backslash: no match
    assert out["text"] == "ab\n\ncd"


@pytest.mark.slow
def test_max_tokens_past_the_context_is_refused_with_the_servers_message(tiny_gguf):
    from tinyllm.server.checks.admission import PromptLimits
    from tinyllm.server.wire.errors import APIError

    r = run("generate", "the tin", "--model", tiny_gguf, "--max-tokens", "125")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    prompt_tokens = generate_json(tiny_gguf, "--max-tokens", "1")["usage"]["prompt_tokens"]
    with pytest.raises(APIError) as server:
        PromptLimits(128, 8).check_room(prompt_tokens, 125, "prompt")
    assert r.stderr == f"tinyllm: error: {server.value.message.replace('max_tokens', '--max-tokens')}\n"
    assert generate_json(tiny_gguf, "--max-tokens", str(128 - prompt_tokens))["usage"]["total_tokens"] <= 128


@pytest.mark.slow
def test_the_default_max_tokens_stops_at_the_end_of_a_small_context(tiny_gguf):
    out = generate_json(tiny_gguf, "--ignore-eos")  # 256 tokens by default, more than the context of 128
    assert out["finish_reason"] == "length" and out["usage"]["total_tokens"] == 128


@pytest.mark.slow
def test_json_prints_its_documented_fields_and_per_token_ones_only_when_asked(tiny_gguf):
    plain = generate_json(tiny_gguf, "--max-tokens", "5", "--ignore-eos")
    assert set(plain) == {"text", "ids", "finish_reason", "usage", "timings", "stats"}
    assert set(plain["timings"]) == {"ttft_s", "prefill_s", "decode_s", "total_s"}
    assert "token_times" not in plain["stats"] and "arrival" not in plain["stats"]
    asked = generate_json(tiny_gguf, "--max-tokens", "5", "--ignore-eos", "--logprobs", "2", "--timings")
    assert set(asked) == set(plain) | {"logprobs", "token_times_s"} and asked["ids"] == plain["ids"]
    assert [t["token"] for t in asked["logprobs"]] == asked["ids"]
    assert all(len(t["top"]) == 2 and t["top"][0][1] >= t["top"][1][1] for t in asked["logprobs"])
    times = asked["token_times_s"]
    assert len(times) == 5 and times == sorted(times) and times[0] == pytest.approx(asked["timings"]["ttft_s"])
    assert generate_json(tiny_gguf, "--max-tokens", "5", "--logprobs", "0")["logprobs"][0]["top"] == []


@pytest.mark.slow
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_json_output_cut_by_max_tokens_says_so_and_exits_1(tiny_gguf, json_flag):
    whole = run("generate", "the tin", "--model", tiny_gguf, "--json-object", *json_flag)
    assert whole.returncode == 0 and whole.stderr == "", whole.stderr
    cut = run("generate", "the tin", "--model", tiny_gguf, "--json-object", "--max-tokens", "1", *json_flag)
    assert cut.returncode == 1
    assert cut.stderr == (
        "tinyllm: error: the output ran out of tokens (--max-tokens or the context) before the JSON was whole; "
        "raise --max-tokens\n"
    )
    text = json.loads(cut.stdout)["text"] if json_flag else cut.stdout[:-1]
    with pytest.raises(ValueError):
        json.loads(text)


@pytest.mark.slow
def test_a_regex_cut_by_max_tokens_exits_1_with_json(tiny_gguf):
    r = run("generate", "the tin", "--model", tiny_gguf, "--regex", "a{20}", "--max-tokens", "3", "--json")
    assert r.returncode == 1 and "before the model ended the output of --regex" in r.stderr
    assert json.loads(r.stdout)["finish_reason"] == "length"


@pytest.mark.slow
def test_the_prompt_can_come_from_stdin(tiny_gguf):
    from_stdin = run("generate", "-", "--model", tiny_gguf, "--max-tokens", "4", "--json", input="the tin")
    assert from_stdin.returncode == 0, from_stdin.stderr
    from_args = generate_json(tiny_gguf, "--max-tokens", "4")
    assert json.loads(from_stdin.stdout)["ids"] == from_args["ids"] and from_args["usage"]["prompt_tokens"] > 1


@pytest.mark.slow
def test_stop_at_a_blank_line_on_the_default_model():
    prompt = "Two paragraphs about the sea.\n\nThe sea"
    whole = json.loads(run("generate", prompt, "--max-tokens", "120", "--json").stdout)["text"]
    assert "\n\n" in whole  # else the check below proves nothing
    stopped = json.loads(run("generate", prompt, "--max-tokens", "120", "--json", "--stop", "\\n\\n").stdout)
    assert stopped["text"] == whole[: whole.index("\n\n")] and stopped["finish_reason"] == "stop"


def test_serve_takes_the_embedding_limits():
    from tinyllm.cli import build_parser
    from tinyllm.engine.embedding_queue import EmbeddingLimits
    from tinyllm.errors import TinyLLMError
    from tinyllm.server.cli import embedding_limits

    assert embedding_limits(build_parser().parse_args(["serve"])) == EmbeddingLimits()
    args = build_parser().parse_args(["serve", "--embedding-max-tokens", "100", "--embedding-queue-requests", "2"])
    assert (embedding_limits(args).max_request_tokens, embedding_limits(args).max_queued_requests) == (100, 2)
    args = build_parser().parse_args(["serve", "--embedding-max-tokens", "9000", "--embedding-queue-tokens", "8000"])
    with pytest.raises(TinyLLMError, match="--embedding-queue-tokens must be at least --embedding-max-tokens"):
        embedding_limits(args)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--embedding-batch-tokens", "0"])
