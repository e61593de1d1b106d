"""SIGTERM drains `tinyllm serve` (transport/drain.py): new requests get 503 while running ones finish, or,
past --shutdown-timeout, end with their final event; the process exits 0. A real server in a child process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading

import httpx
import openai
import pytest
import torch

from helpers.live_server import ROOT
from helpers.model_files import random_tiny_llama, write_gguf
from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread, free_port


@pytest.mark.slow
def test_a_draining_server_answers_503_with_the_error_object_and_health_says_so(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(tiny_llama(1, vocab_size=smollm_tokenizer.vocab_size), smollm_tokenizer)
    app = create_app(llm, num_blocks=16)
    with ServerThread(app) as srv:
        client = openai.OpenAI(base_url=f"{srv.wait_ready().url}/v1", api_key="unused", max_retries=0)
        assert client.completions.create(model="tinyllm", prompt="hi", max_tokens=2).choices[0].finish_reason
        app.state.server.draining = True  # what DrainingServer does on SIGTERM
        with pytest.raises(openai.APIStatusError) as refused:
            client.completions.create(model="tinyllm", prompt="hi", max_tokens=2)
        health = httpx.get(f"{srv.url}/health")
    assert refused.value.status_code == 503
    assert refused.value.body["message"] == "the server is shutting down"
    assert refused.value.body["code"] == "server_shutting_down"
    assert health.status_code == 503 and health.json() == {"status": "shutting_down", "error": None}


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """A tiny random model whose end-of-text ids (0 and 2) have zero logits: greedy, it never stops by itself."""
    path = str(tmp_path_factory.mktemp("drain") / "tiny.gguf")
    model = random_tiny_llama(5, max_position_embeddings=8192)
    with torch.no_grad():
        model.lm_head.weight[[0, 2]] = 0
    write_gguf(model, path)
    return path


class Server:
    """`tinyllm serve` on the tiny file with a shutdown timeout, in a child process."""

    def __init__(self, model: str, shutdown_timeout: str, log_path, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path  # its log (a file: a pipe nobody reads could fill and block it)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "tinyllm", "serve", "--model", model, "--port", str(self.port), "--threads", "1"]
        cmd += ["--shutdown-timeout", shutdown_timeout, "--kv-memory-gb", "0.05", *extra]
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        with httpx.Client(timeout=5) as c:
            for _ in range(900):
                try:
                    if c.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                assert self.proc.poll() is None, self.log()
                threading.Event().wait(0.2)
        pytest.fail("tinyllm serve did not become ready")

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


def lines_of(url: str, path: str, body: dict, started: threading.Event, out: list) -> None:
    """Every non-empty line of a streamed answer; `started` is set once its first line came."""
    with httpx.Client(timeout=120) as c, c.stream("POST", url + path, json=body) as r:
        assert r.status_code == 200
        # Lines end at b"\n" alone: iter_lines would also cut at U+2028 or U+0085, which a random model's text
        # holds unescaped in the JSON.
        pending = b""
        for chunk in r.iter_bytes():
            *done, pending = (pending + chunk).split(b"\n")
            for line in done:
                if line.strip():
                    out.append(line.decode().rstrip("\r"))
                    started.set()


def openai_events(lines: list[str]) -> list:
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


def start_stream(url: str, path: str, body: dict) -> tuple[threading.Thread, list]:
    started, out = threading.Event(), []
    thread = threading.Thread(target=lines_of, args=(url, path, body, started, out))
    thread.start()
    assert started.wait(120)
    return thread, out


@pytest.mark.slow
def test_a_stream_finishes_within_the_shutdown_timeout_and_the_server_exits_0(tiny_gguf, tmp_path):
    server = Server(tiny_gguf, "120", tmp_path / "serve.log")
    try:
        body = {"prompt": "the tin", "max_tokens": 1000, "ignore_eos": True, "stream": True}
        thread, lines = start_stream(server.url, "/v1/completions", {**body, "stream_options": {"include_usage": True}})
        server.proc.send_signal(signal.SIGTERM)
        thread.join(120)
        assert server.proc.wait(60) == 0, server.log()
        events = openai_events(lines)
        assert not any("error" in e for e in events)
        assert [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]] == ["length"]
        assert events[-1]["usage"]["completion_tokens"] == 1000  # all of it: max_tokens, not the shutdown
        log = server.log()
        assert re.search(r"its KV pool \(0\.05 GiB, \d+ blocks of 16 tokens\) was written in", log), log
        assert re.search(r"shutting down: \d+ requests in flight get up to 120 s to finish", log), log
        assert "ending the" not in log
    finally:
        server.stop()


@pytest.mark.slow
def test_past_the_shutdown_timeout_streams_end_with_a_final_event_and_new_requests_get_503(tiny_gguf, tmp_path):
    # One token per embedding forward: the two 8000-token embeddings below cannot finish within the timeout.
    server = Server(tiny_gguf, "3", tmp_path / "serve.log", "--embedding-batch-tokens", "1")
    try:
        embedded = []
        embeds = [
            threading.Thread(
                target=lambda: embedded.append(
                    httpx.post(f"{server.url}/v1/embeddings", json={"input": [[7] * 2000] * 4}, timeout=120)
                )
            )
            for _ in range(2)
        ]
        for t in embeds:
            t.start()
        long = {"max_tokens": 6000, "ignore_eos": True, "stream": True}
        chat, chat_lines = start_stream(
            server.url, "/v1/chat/completions", {**long, "messages": [{"role": "user", "content": "hi"}]}
        )
        ollama, ollama_lines = start_stream(
            server.url,
            "/api/generate",
            {"model": "tiny", "prompt": "the tin", "stream": True, "options": {"num_predict": 6000, "temperature": 0}},
        )
        whole = {}
        waiting = threading.Thread(
            target=lambda: whole.update(
                r=httpx.post(
                    f"{server.url}/v1/completions",
                    json={"prompt": "the tin", "max_tokens": 6000, "ignore_eos": True},
                    timeout=120,
                )
            )
        )
        waiting.start()
        with httpx.Client(timeout=10) as c:  # all three run before the signal
            while c.get(f"{server.url}/health").json()["running"] < 3:
                threading.Event().wait(0.05)
        server.proc.send_signal(signal.SIGTERM)
        with httpx.Client(timeout=10) as c:
            health = c.get(f"{server.url}/health")
            refused = c.post(f"{server.url}/v1/completions", json={"prompt": "the tin", "max_tokens": 2})
        for t in (chat, ollama, waiting, *embeds):
            t.join(120)
        assert server.proc.wait(60) == 0, server.log()

        assert health.status_code == 503 and health.json()["status"] == "shutting_down"
        assert refused.status_code == 503
        assert refused.json()["error"]["message"] == "the server is shutting down"

        events = openai_events(chat_lines)
        *chunks, error = events
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert not any(c["finish_reason"] for e in chunks[:-1] for c in e["choices"])
        assert error["error"]["message"] == "the server is shutting down"
        assert error["error"]["code"] == "server_shutting_down"

        last = json.loads(ollama_lines[-1])
        assert last["done"] is True and last["done_reason"] == "length"
        assert last["error"] == "the server is shutting down" and 0 < last["eval_count"] < 6000
        assert not any(json.loads(line)["done"] for line in ollama_lines[:-1])

        assert whole["r"].status_code == 503
        assert whole["r"].json()["error"]["message"] == "the server is shutting down"
        assert whole["r"].json()["error"]["code"] == "server_shutting_down"
        # The embeddings, running and queued at the deadline, are answered 503 as well: no 500, no traceback.
        assert [r.status_code for r in embedded] == [503, 503]
        assert all(r.json()["error"]["message"] == "the server is shutting down" for r in embedded)
        assert "Traceback" not in server.log()
        assert "shutting down: ending the 5 requests still running" in server.log()
    finally:
        server.stop()
