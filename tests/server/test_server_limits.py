"""One request must not hurt the others: cheap limits before tokenizing, work off the event loop and the
engine thread, lone surrogates, stop caps, slow clients, per-request faults, and OpenAI's shapes."""

import json
import socket
import threading

import httpx
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.checks.admission import MAX_STOP_CHARS, MAX_STOP_STRINGS
from tinyllm.server.transport.server_thread import ServerThread
from tinyllm.server.transport.slow_clients import ConnectionLimits

CONTEXT = 256
CHAT = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def server(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(3, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=CONTEXT), smollm_tokenizer
    )
    llm.path = "/models/Tiny-Model.Q4_1.gguf"  # as if loaded from a file: its name and stem are aliases
    limits = ConnectionLimits(header_timeout_s=0.5, body_timeout_s=0.5)
    with ServerThread(create_app(llm, num_blocks=64, limits=limits), limits=limits) as srv:
        yield srv.wait_ready()


@pytest.fixture
def ready(server):
    return server.server.config.app.state.server.ready


def post(server, path, body, **kw):
    return httpx.post(f"{server.url}{path}", json=body, timeout=60, **kw)


class Spy:
    """Wraps the tokenizer's encode and its chat encode: records calls and the thread each ran on."""

    def __init__(self, tok, monkeypatch, entered=None, release=None):
        self.threads, self.calls = [], 0
        for name in ("encode", "encode_chat"):
            real = getattr(tok, name)

            def spied(*args, _real=real, **kwargs):
                self.calls += 1
                self.threads.append(threading.current_thread().name)
                if entered is not None:
                    entered.set()
                    release.wait(30)
                return _real(*args, **kwargs)

            monkeypatch.setattr(tok, name, spied)


def test_oversized_prompts_are_refused_before_tokenizing(server, ready, monkeypatch):
    spy = Spy(ready.tokenizer, monkeypatch)
    too_long = "x" * (ready.limits.max_chars + 1)
    cases = [
        ("/v1/completions", {"prompt": too_long}),
        ("/v1/completions", {"prompt": [5] * CONTEXT}),
        ("/v1/completions", {"prompt": ["a", too_long]}),
        ("/v1/chat/completions", {"messages": CHAT * (CONTEXT + 1)}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": too_long}]}),
        ("/tokenize", {"prompt": too_long}),
    ]
    for path, body in cases:
        r = post(server, path, body)
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", (path, r.text)
    assert spy.calls == 0


def test_prompt_plus_max_tokens_beyond_the_context_is_context_length_exceeded(server):
    r = post(server, "/v1/completions", {"prompt": [5] * 200, "max_tokens": 100})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert r.json()["error"]["param"] == "max_tokens"
    full = post(server, "/v1/completions", {"prompt": [5] * (CONTEXT - 1), "max_tokens": 1})
    assert full.status_code == 200


def test_tokenizing_runs_off_the_event_loop_and_the_engine_thread(server, ready, monkeypatch):
    entered, release = threading.Event(), threading.Event()
    spy = Spy(ready.tokenizer, monkeypatch, entered, release)
    slow = threading.Thread(target=post, args=(server, "/v1/completions", {"prompt": "slow", "max_tokens": 2}))
    slow.start()
    try:
        assert entered.wait(30)
        # While the tokenizer is stuck, the server still answers and the engine still generates.
        assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
        ok = post(server, "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 3, "ignore_eos": True})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3
        assert not release.is_set() and slow.is_alive()
    finally:
        release.set()
        slow.join(30)
    assert spy.threads and all(name not in ("tinyllm-engine", "tinyllm-uvicorn") for name in spy.threads)


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/completions", {"prompt": "a\ud800b", "max_tokens": 2}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a\udc00b"}], "max_tokens": 2}),
        ("/tokenize", {"prompt": "a\ud800b"}),
    ],
)
def test_lone_surrogates_become_replacement_characters(server, ready, path, body):
    r = httpx.post(
        f"{server.url}{path}",
        content=json.dumps(body).encode(),
        timeout=60,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 200, r.text
    if path == "/tokenize":
        assert r.json()["tokens"] == ready.tokenizer.encode("a\ufffdb")


def test_stop_strings_are_capped(server):
    many = post(server, "/v1/completions", {"prompt": "x", "stop": ["s"] * (MAX_STOP_STRINGS + 1)})
    long = post(server, "/v1/completions", {"prompt": "x", "stop": ["ab" * MAX_STOP_CHARS]})
    for r, limit in ((many, MAX_STOP_STRINGS), (long, MAX_STOP_CHARS)):
        assert r.status_code == 400 and r.json()["error"]["param"] == "stop"
        assert str(limit) in r.json()["error"]["message"]


def test_a_slow_client_is_cut_off(server):
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # headers never finish
        assert s.recv(100) == b""  # the server closed the connection
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"prompt":'
        )  # the body stops arriving
        answer = b""
        while b"stopped arriving" not in answer and (chunk := s.recv(4096)):  # headers and body may split
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408") and b"stopped arriving" in answer


def test_a_fault_in_one_request_is_a_500_for_it_alone(server, monkeypatch):
    from tinyllm.text.stop import StopMatcher

    real_push = StopMatcher.push

    def push(self, text):
        if "BOOM" in self._automaton.stops:
            raise RuntimeError("injected fault")
        return real_push(self, text)

    monkeypatch.setattr(StopMatcher, "push", push)
    bad = post(server, "/v1/completions", {"prompt": "x", "max_tokens": 4, "stop": ["BOOM"]})
    assert bad.status_code == 500 and "injected fault" in bad.json()["error"]["message"]
    streamed = post(server, "/v1/completions", {"prompt": "x", "max_tokens": 4, "stop": ["BOOM"], "stream": True})
    events = [e[len("data: ") :] for e in streamed.text.split("\n\n") if e]
    assert events[-1] == "[DONE]" and '"server_error"' in events[-2]
    good = post(server, "/v1/completions", {"prompt": "x", "max_tokens": 4, "stop": ["never"]})
    assert good.status_code == 200


def test_openai_conformance_details(server):
    for name in ("Tiny-Model.Q4_1.gguf", "Tiny-Model.Q4_1"):
        assert (
            post(server, "/v1/chat/completions", {"model": name, "messages": CHAT, "max_tokens": 1}).status_code == 200
        )
        card = httpx.get(f"{server.url}/v1/models/{name}")
        assert card.status_code == 200 and card.json()["id"] == "tinyllm"  # the served name
    r = post(server, "/v1/completions", {"prompt": "x", "ignore_eos": True}).json()
    assert r["usage"]["completion_tokens"] == 16 and r["system_fingerprint"].startswith("tinyllm-")
    bad = post(server, "/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "stream_options"
    assert httpx.get(f"{server.url}/v1/models/").status_code == 404  # no redirect built from the Host header
