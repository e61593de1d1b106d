"""`bench serve --llamacpp-server`'s pieces that run without llama.cpp: the peer's request body (text prompt,
EOS banned, as its server takes no token ids or ignore_eos), the ratios of ours over the peer, the streams
each side ran at once, and the one-line refusal when the peer cannot run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tinyllm.bench import serve
from tinyllm.bench.workload import Work
from tinyllm.errors import TinyLLMError


class Words:
    def decode(self, ids):
        return " ".join(f"w{i}" for i in ids)


def test_the_peer_gets_the_prompt_as_text_with_eos_banned():
    body = serve.llamacpp_body(Words(), [2, 7])(Work([5, 6], 9))
    assert body["prompt"] == "w5 w6" and body["max_tokens"] == 9 and body["stream"]
    assert body["logit_bias"] == {"2": -100, "7": -100} and body["temperature"] == 0
    ours = serve.our_body(Work([5, 6], 9))
    assert ours["prompt"] == [5, 6] and ours["ignore_eos"]


def side(rate, ttft, itl):
    return {
        "concurrency": 4,
        "requests": 4,
        "output_tokens_per_s": rate,
        "output_tokens": 256,
        "ttft_s": {"p50": ttft, "p99": 2 * ttft},
        "itl_s": {"p50": itl, "p99": 3 * itl},
        "peak_streaming": 4,
        "texts": ["a"] * 4,
    }


def test_ratios_are_ours_over_the_peer_for_rates_and_theirs_over_ours_for_latency():
    (row,) = serve.compare([side(100.0, 0.1, 0.01)], [side(120.0, 0.08, 0.01)], [{**side(50.0, 0.4, 0.02)}])
    assert row["http_over_llamacpp_tokens_per_s"] == 2.0
    assert row["llamacpp_over_http_ttft_p50"] == 4.0 and row["llamacpp_over_http_itl_p99"] == 2.0
    assert row["texts_identical"] == "4/4" and row["http_streams_at_once"] == row["llamacpp_streams_at_once"] == 4
    assert row["llamacpp_output_tokens"] == "256/256"
    (alone,) = serve.compare([side(100.0, 0.1, 0.01)], [side(120.0, 0.08, 0.01)], [])
    assert "http_over_llamacpp_tokens_per_s" not in alone


def test_the_peer_is_refused_in_one_line_without_its_package_or_a_gguf_file(tmp_path):
    args = SimpleNamespace(model=str(tmp_path / "model.safetensors"), threads=2, max_batched_tokens=256)
    with pytest.raises(TinyLLMError, match="^--llamacpp-server (needs llama-cpp-python|runs GGUF files)"):
        serve.start_llamacpp_server(args, 8000, 2048)


@pytest.mark.parametrize(
    "spans, most",
    [
        ([], 0),
        ([(1.0, 1.0)], 1),  # one token: first and last at once
        ([(0.0, 1.0), (2.0, 3.0)], 1),  # one after the other, as a server that runs one request at a time
        ([(0.0, 2.0), (1.0, 3.0)], 2),
        ([(0.0, 1.0), (1.0, 2.0)], 2),  # one's last token and another's first at the same moment: together
        ([(0.0, 5.0), (1.0, 2.0), (3.0, 4.0), (3.5, 6.0)], 3),
    ],
)
def test_streams_at_once_counts_overlapping_first_to_last_token_spans(spans, most):
    assert serve.peak_overlap(spans) == most


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_our_server_batches_the_largest_concurrency_or_max_num_seqs():
    from tinyllm.cli import build_parser

    for argv, most in (([], 32), (["--concurrency", "1", "8"], 8), (["--max-num-seqs", "1"], 1)):
        args = build_parser().parse_args(["bench", "serve", *argv])
        cmd = serve.server_command(args, 8123)
        assert flag(cmd, "--max-num-seqs") == str(most) and flag(cmd, "--host") == "127.0.0.1"


def test_the_peer_serves_each_request_to_its_end():
    args = SimpleNamespace(threads=2, max_batched_tokens=256)
    cmd = serve.llamacpp_command(args, "m.gguf", 8124, 2048)
    assert flag(cmd, "--interrupt_requests") == "False"  # its default cuts the running stream at each arrival
    assert flag(cmd, "--n_threads") == flag(cmd, "--n_threads_batch") == "2" and flag(cmd, "--host") == "127.0.0.1"
    settings = pytest.importorskip("llama_cpp.server.settings")  # the flag is one of its server's settings
    assert "interrupt_requests" in settings.ServerSettings.model_fields
