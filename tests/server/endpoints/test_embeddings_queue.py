"""/v1/embeddings and /api/embed on the server's EmbeddingQueue: a full queue answers 429 with Retry-After while
everyone else is served, a client that leaves has its inputs skipped, and shutting down answers the queued
requests 503 after the running batch. The model's embedding forwards wait at a gate the test opens, so what is
running and what is queued is known without timing."""

import contextlib
import json
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.engine.embedding_queue import EmbeddingLimits
from tinyllm.model.llama import LlamaForCausalLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

LIMITS = EmbeddingLimits(max_request_tokens=4096, max_queued_requests=3, max_queued_tokens=4096, batch_tokens=64)


class GatedLlama(LlamaForCausalLM):
    """A plain causal forward (an embedding's; the engine's steps pass a step) waits until `gate` is set."""

    gate: threading.Event

    def hidden_states(self, ids, step=None):
        if step is None:
            assert self.gate.wait(60)
        return super().hidden_states(ids, step)


@contextlib.contextmanager
def gated_server(tokenizer):
    model = tiny_llama(11, vocab_size=tokenizer.vocab_size, max_position_embeddings=1024)
    model.__class__, model.gate = GatedLlama, threading.Event()  # the same weights, gated
    app = create_app(LLM.from_parts(model, tokenizer), embedding_limits=LIMITS)
    srv = ServerThread(app).start().wait_ready()
    pool = ThreadPoolExecutor(8)
    try:
        yield srv, model.gate, pool
    finally:
        model.gate.set()
        srv.stop()
        pool.shutdown()


@pytest.fixture(scope="module")
def shared(smollm_tokenizer, one_thread):
    with gated_server(smollm_tokenizer) as served:
        yield served


@pytest.fixture
def gated(shared):
    """The shared server with its gate shut; every request answered when the test ends."""
    srv, gate, pool = shared
    gate.clear()
    yield shared
    gate.set()
    wait_for(lambda: queue_of(srv) is None or queue_of(srv).counts().num_queued_requests == 0, "the queue to drain")


@pytest.fixture
def own(smollm_tokenizer, one_thread):
    with gated_server(smollm_tokenizer) as served:
        yield served


def queue_of(srv):
    return srv.server.config.app.state.server.ready.embedder.queue


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited 30 s for {what}")
        time.sleep(0.01)


def embed(srv, body: dict, path: str = "/v1/embeddings") -> httpx.Response:
    return httpx.post(f"{srv.url}{path}", json=body, timeout=60)


def fill(srv, pool) -> list:
    """Three requests in: one running at the gate, two queued (the limit of 3 requests)."""
    first = pool.submit(embed, srv, {"input": [[1, 2]]})
    wait_for(lambda: queue_of(srv) is not None and queue_of(srv).counts().num_queued_requests == 1, "the first")
    rest = [
        pool.submit(embed, srv, {"input": [[3, 4, 5], [6]]}),
        pool.submit(embed, srv, {"input": "hi"}, "/api/embed"),
    ]
    wait_for(lambda: queue_of(srv).counts().num_queued_requests == 3, "the queue to fill")
    return [first, *rest]


def test_a_full_queue_answers_429_with_retry_after_and_everyone_else_is_served(gated):
    srv, gate, pool = gated
    admitted = fill(srv, pool)
    r = embed(srv, {"input": "one more"})
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    error = r.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == "queue_full"
    assert error["message"].startswith("the embedding queue is full: 3 embedding requests are waiting")
    r = embed(srv, {"input": "one more"}, "/api/embed")  # Ollama's shape, the same status
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1 and "queue is full" in r.json()["error"]
    chat = httpx.post(f"{srv.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=60)
    assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] == 2
    gate.set()
    assert [f.result().status_code for f in admitted] == [200, 200, 200]
    assert len(admitted[1].result().json()["data"]) == 2 and len(admitted[2].result().json()["embeddings"]) == 1
    assert embed(srv, {"input": "one more"}).status_code == 200


def test_a_client_that_disconnects_has_its_inputs_skipped(gated):
    srv, gate, pool = gated
    before = queue_of(srv).counts() if queue_of(srv) is not None else None
    running = pool.submit(embed, srv, {"input": [[1, 2]]})
    wait_for(lambda: queue_of(srv) is not None and queue_of(srv).counts().num_queued_requests == 1, "the first")
    body = json.dumps({"input": [[7] * (1 + i % 16) for i in range(400)]}).encode()  # 400 inputs, 3,400 tokens
    leaving = socket.create_connection(("127.0.0.1", srv.port))
    head = "POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    leaving.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    wait_for(lambda: queue_of(srv).counts().num_queued_requests == 2, "the large request to queue")
    leaving.close()
    skipped = before.num_skipped if before else 0
    wait_for(lambda: queue_of(srv).counts().num_skipped == skipped + 400, "the large request's inputs to be dropped")
    gate.set()
    assert running.result().status_code == 200 and embed(srv, {"input": [[9]]}).status_code == 200
    after = queue_of(srv).counts()
    embedded = after.num_embedded - (before.num_embedded if before else 0)
    assert (embedded, after.num_skipped - skipped, after.num_queued_requests) == (2, 400, 0)


def test_shutting_down_finishes_the_running_batch_and_answers_the_queued_503(own, caplog):
    srv, gate, pool = own
    admitted = fill(srv, pool)
    embedder = srv.server.config.app.state.server.ready.embedder
    closing = pool.submit(embedder.close)  # waits for the running batch
    wait_for(lambda: queue_of(srv).is_closed, "the queue to close")
    r = embed(srv, {"input": "late"})
    assert r.status_code == 503 and r.json()["error"]["message"] == "the server is shutting down"
    with caplog.at_level(logging.WARNING):
        gate.set()
        closing.result(timeout=30)
        answers = [f.result() for f in admitted]
    assert [a.status_code for a in answers] == [200, 503, 503]
    assert answers[1].json()["error"]["message"] == "the server is shutting down"
    assert answers[2].json() == {"error": "the server is shutting down"}  # Ollama's shape
    assert not queue_of(srv).is_running and not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_apps_shutdown_closes_the_queue(own):
    srv, gate, _ = own
    gate.set()
    assert embed(srv, {"input": "a"}).status_code == 200 and queue_of(srv).is_running
    srv.stop()
    assert queue_of(srv).is_closed and not queue_of(srv).is_running
