"""Ollama's bodies are counted before validation, as the OpenAI routes' are: generate's `context` ids against the
model's context and embed's inputs against the limit answer 400 before a model of the body is built (validating
millions of values holds the GIL, and the event loop with it)."""

import httpx
import pytest

from helpers.live_server import tiny_llm
from tinyllm.server import create_app
from tinyllm.server.checks.embeddings import MAX_INPUTS
from tinyllm.server.ollama.protocol import EmbedBody, GenerateBody
from tinyllm.server.transport.server_thread import ServerThread

ONE_TOKEN = {"options": {"num_predict": 1}}


@pytest.fixture(scope="module")
def server(smollm_tokenizer, one_thread):
    llm = tiny_llm(smollm_tokenizer)
    with ServerThread(create_app(llm, served_model_name="tiny", num_blocks=64)) as srv:
        yield srv.wait_ready(), llm.config.max_position_embeddings


def count_validations(model, monkeypatch) -> list:
    calls, real = [], model.model_validate
    monkeypatch.setattr(model, "model_validate", lambda data, *a, **k: calls.append(1) or real(data, *a, **k))
    return calls


@pytest.mark.parametrize(
    "path, model, field, body",
    [
        ("/api/generate", GenerateBody, "context", lambda n: {"prompt": "Hi", "context": [5] * n, **ONE_TOKEN}),
        ("/api/embed", EmbedBody, "input", lambda n: {"input": ["Hi"] * n}),
    ],
)
def test_too_many_ids_or_inputs_are_refused_before_validation(server, monkeypatch, path, model, field, body):
    (srv, context), calls = server, count_validations(model, monkeypatch)
    too_many = context if field == "context" else MAX_INPUTS + 1
    r = httpx.post(f"{srv.url}{path}", json={"model": "tiny", "stream": False, **body(too_many)}, timeout=60)
    assert r.status_code == 400 and r.json()["error"].startswith(field), r.text
    assert calls == []
    ok = httpx.post(f"{srv.url}{path}", json={"model": "tiny", "stream": False, **body(3)}, timeout=60)
    assert ok.status_code == 200 and calls == [1]
