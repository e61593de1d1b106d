"""The command line's flags, parsed in-process: one definition per shared flag, help and a default for each,
ranges that are SamplingParams' own, one-line errors, and escapes in --stop."""

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinyllm.bench.cli import add_kind_args
from tinyllm.cli import build_parser
from tinyllm.cli_flags import unescape
from tinyllm.errors import TinyLLMError
from tinyllm.sampling.params import SamplingParams

SHARED = ["--model", "--dtype", "--weights", "--quantize", "--threads", "--speculative", "--num-draft-tokens"]


def subparsers(parser: argparse.ArgumentParser) -> dict:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def commands() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser: generate, chat, ..., serve, and each bench kind with its own flags."""
    top = subparsers(build_parser())
    found = {name: p for name, p in top.items() if name != "bench"}
    for kind, p in subparsers(top["bench"]).items():
        add_kind_args(p)
        found[f"bench {kind}"] = p
    return found


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The flags --help shows."""
    return {
        a.option_strings[-1]: a
        for a in parser._actions
        if a.option_strings and a.dest != "help" and a.help != argparse.SUPPRESS
    }


def test_a_shared_flag_has_one_help_text_in_every_command():
    seen: dict[str, set] = {}
    for parser in commands().values():
        for flag, action in options(parser).items():
            if flag in SHARED:
                seen.setdefault(flag, set()).add((action.help, action.default, tuple(action.choices or ())))
    assert set(seen) == set(SHARED)
    for flag in ("--model", "--dtype", "--weights", "--quantize", "--threads"):
        assert len(seen[flag]) == 1, (flag, seen[flag])
    # bench speculative has its own --num-draft-tokens (a list of depths to compare); the others share one
    assert len(seen["--speculative"]) == 1


@pytest.mark.parametrize("command", ["generate", "chat", "serve", "info", "perplexity", "worker"])
def test_every_flag_has_help_and_every_value_says_its_default(command):
    parser = commands()[command]
    for flag, action in options(parser).items():
        assert action.help, f"{command} {flag} has no help"
        takes_value = action.nargs != 0
        required = getattr(action, "required", False)
        if takes_value and not required and flag not in ("--json-schema", "--grammar", "--regex"):
            assert "default" in action.help, f"{command} {flag}: {action.help!r} says no default"
    for action in parser._actions:
        if not action.option_strings:
            assert action.help, f"{command}'s {action.dest} has no help"


def test_the_prompt_and_the_sampling_flags_say_their_defaults_in_generate_help():
    text = subparsers(build_parser())["generate"].format_help()
    for words in (
        "the text to continue",
        "(default 256, or what the",
        "(default 0: off)",
        "(default 1: off)",
        "(default 0)",
        "(default 4)",
        "\\n, \\t and \\\\ stand for",
        "exit status: 0 done; 1 the output",
    ):
        assert words in " ".join(text.split()), words


def parse(*argv):
    return build_parser().parse_args(["generate", "hi", *argv])


# (flag, field, values on both sides of the edges of SamplingParams' range)
EDGES = [
    ("--temperature", "temperature", ["-0.001", "0", "1e-9", "2", "inf", "nan"]),
    ("--top-k", "top_k", ["-2", "-1", "0", "1", "50"]),
    ("--top-p", "top_p", ["0", "1e-9", "0.5", "1", "1.0001", "nan"]),
    ("--min-p", "min_p", ["-0.1", "0", "1", "1.01"]),
    ("--repetition-penalty", "repetition_penalty", ["0.0009", "0.001", "1", "1000", "1000.5"]),
    ("--presence-penalty", "presence_penalty", ["-2.01", "-2", "2", "2.01"]),
    ("--frequency-penalty", "frequency_penalty", ["-2.01", "-2", "0", "2", "2.01"]),
    ("--seed", "seed", ["-1", "0", str(2**63 - 1), str(2**63)]),
    ("--max-tokens", "max_tokens", ["-1", "0", "1", "100000"]),
    ("--logprobs", "logprobs", ["-1", "0", "20", "21"]),
]


def number(text: str):
    try:
        return int(text)
    except ValueError:
        return float(text)


@pytest.mark.slow
@pytest.mark.parametrize("flag, field, values", EDGES)
def test_the_flags_ranges_are_sampling_params_own(flag, field, values, capsys):
    for text in values:
        try:
            SamplingParams(**{field: number(text)})
            library_takes = True
        except TinyLLMError:
            library_takes = False
        try:
            parse(flag, text)
            cli_takes = True
        except SystemExit as exc:
            assert exc.code == 2
            cli_takes = False
        assert cli_takes == library_takes, (flag, text)
        err = capsys.readouterr().err
        if not cli_takes:
            [line] = err.splitlines()
            assert line.startswith(f"tinyllm generate: error: {flag} must be ") and line.endswith(
                "(see tinyllm generate --help)"
            )


def test_max_tokens_below_one_says_so_in_the_cli_words(capsys):
    with pytest.raises(SystemExit) as exc:
        parse("--max-tokens", "0")
    assert exc.value.code == 2
    assert capsys.readouterr().err == (
        "tinyllm generate: error: --max-tokens must be at least 1, got 0 (see tinyllm generate --help)\n"
    )


@pytest.mark.parametrize(
    "argv, words",
    [
        (["generate"], "tinyllm generate: error: the following arguments are required: prompt"),
        (["generate", "hi", "--top-k", "x"], "tinyllm generate: error: --top-k must be an integer, got 'x'"),
        (["generate", "hi", "--cache", "big"], "tinyllm generate: error: argument --cache: invalid choice: 'big'"),
        (["generate", "hi", "--bogus"], "tinyllm generate: error: unrecognized arguments: --bogus"),
        (["bench", "serve", "--port", "0"], "tinyllm bench serve: error: --port must be in 1..65535, got 0"),
        (["serve", "--port", "70000"], "tinyllm serve: error: --port must be in 1..65535, got 70000"),
        (["serve", "--max-num-seqs", "0"], "tinyllm serve: error: --max-num-seqs must be at least 1, got 0"),
        (["serve", "--block-size", "0"], "tinyllm serve: error: --block-size must be at least 1, got 0"),
        (
            ["serve", "--shutdown-timeout", "0"],
            "tinyllm serve: error: --shutdown-timeout must be a positive number of seconds, got 0",
        ),
        (["bench", "serve", "--max-num-seqs", "-1"], "tinyllm bench serve: error: --max-num-seqs must be at least 1"),
        (["nonsense"], "tinyllm: error: argument COMMAND: invalid choice: 'nonsense'"),
    ],
)
def test_parse_errors_are_one_line_that_points_at_help(argv, words, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(words) and line.endswith("--help)"), line


@pytest.mark.parametrize(
    "typed, meant",
    [
        ("\\n\\n", "\n\n"),
        ("a\\tb", "a\tb"),
        ("\\\\n", "\\n"),  # an escaped backslash, then a plain n
        ("C:\\path", "C:\\path"),  # other backslashes stay
        ("end\\", "end\\"),
        ("plain", "plain"),
    ],
)
def test_stop_strings_unescape_newlines_tabs_and_backslashes(typed, meant):
    assert unescape(typed) == meant
    assert parse("--stop", typed, "--stop", "x").stop == [meant, "x"]


@given(st.text(alphabet="ab\n\t\\", max_size=12))
def test_unescape_undoes_escaping(text):
    escaped = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    assert unescape(escaped) == text


def test_an_empty_stop_string_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse("--stop", "")
    assert "--stop must not be empty" in capsys.readouterr().err


def test_bench_serve_takes_a_port():
    args = build_parser().parse_args(["bench", "serve", "--port", "8123", "--quick"])
    assert args.port == 8123 and args.bench_run.__name__ == "tinyllm.bench.serve"
    assert build_parser().parse_args(["bench", "serve"]).port is None


def test_bench_serve_starts_its_server_on_that_port(monkeypatch):
    from tinyllm.bench import serve

    ports = []

    def start_server(args, port):
        ports.append(port)
        raise RuntimeError("not started in this test")

    monkeypatch.setattr(serve, "start_server", start_server)
    for argv, expected in ((["--port", "8123"], 8123), ([], None)):
        args = build_parser().parse_args(["bench", "serve", *argv])
        with pytest.raises(RuntimeError, match="not started"):
            serve.measure(None, args, [])
        assert ports[-1] == expected or (expected is None and 0 < ports[-1] < 65536)


@pytest.mark.parametrize("command", [["generate", "hi"], ["chat"], ["perplexity", "text.txt"]])
def test_threads_is_a_flag_of_generate_chat_and_perplexity(command):
    def args(*more):
        return build_parser().parse_args([*command, *more])

    assert args("--threads", "3").threads == 3 and args().threads is None
    with pytest.raises(SystemExit):
        args("--threads", "0")


def test_load_sets_the_threads_before_the_model_loads(tmp_path):
    import torch

    from helpers.model_files import random_tiny_llama, write_gguf
    from tinyllm.cli import load

    path = str(tmp_path / "tiny.gguf")
    write_gguf(random_tiny_llama(2), path)
    before = torch.get_num_threads()
    wanted = 2 if before == 1 else 1
    try:
        load(parse("--model", path, "--threads", str(wanted))).close()
        assert torch.get_num_threads() == wanted
    finally:
        torch.set_num_threads(before)
