"""Request bodies are parsed and validated off the event loop, and oversized counts are refused before
validation: a stuck validator leaves /health and other requests answering; 400-shaped errors stay the same."""

import threading

import httpx
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport import body
from tinyllm.server.transport.body import YIELDING_PARSE_BYTES
from tinyllm.server.transport.server_thread import ServerThread
from tinyllm.server.wire.protocol import ChatCompletionRequest, CompletionRequest

CONTEXT = 128
CHAT = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def url(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(5, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=CONTEXT), smollm_tokenizer
    )
    with ServerThread(create_app(llm, num_blocks=32)) as srv:
        yield srv.wait_ready().url


class ValidatorSpy:
    """Wraps a request model's model_validate: counts calls, records threads, and can hold a call."""

    def __init__(self, model, monkeypatch, hold: bool = False):
        self.calls, self.threads = 0, []
        self.entered, self.release = threading.Event(), threading.Event()
        if not hold:
            self.release.set()
        real = model.model_validate

        def validate(data, *args, **kwargs):
            self.calls += 1
            self.threads.append(threading.current_thread().name)
            self.entered.set()
            self.release.wait(30)
            return real(data, *args, **kwargs)

        monkeypatch.setattr(model, "model_validate", validate)


def post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=60)


def test_validation_runs_off_the_event_loop(url, monkeypatch):
    spy = ValidatorSpy(ChatCompletionRequest, monkeypatch, hold=True)
    answers = []
    slow = threading.Thread(
        target=lambda: answers.append(post(url, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 2}))
    )
    slow.start()
    try:
        assert spy.entered.wait(30)
        # The chat body's validation is stuck; the server still answers and the engine still generates.
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200
        ok = post(url, "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 3, "ignore_eos": True})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3
        assert slow.is_alive() and not answers
    finally:
        spy.release.set()
        slow.join(30)
    assert answers[0].status_code == 200
    assert spy.threads and all(name not in ("tinyllm-engine", "tinyllm-uvicorn") for name in spy.threads)


@pytest.mark.parametrize(
    "path, model, body",
    [
        ("/v1/chat/completions", ChatCompletionRequest, {"messages": CHAT * (CONTEXT + 1)}),
        ("/v1/completions", CompletionRequest, {"prompt": [5] * CONTEXT}),
        ("/v1/completions", CompletionRequest, {"prompt": [[5, 6], [5] * CONTEXT]}),
        ("/v1/completions", CompletionRequest, {"prompt": ["a"] * 65}),
    ],
)
def test_counts_over_the_limits_are_refused_before_validation(url, monkeypatch, path, model, body):
    spy = ValidatorSpy(model, monkeypatch)
    r = post(url, path, body)
    assert r.status_code == 400 and r.json()["error"]["param"] in ("messages", "prompt"), r.text
    assert spy.calls == 0
    within = post(url, path, {**body, "messages": CHAT} if "messages" in body else {"prompt": [5, 6], "max_tokens": 1})
    assert within.status_code == 200 and spy.calls == 1


@pytest.mark.parametrize(
    "content, content_type, says",
    [
        (b'{"prompt": "x"', "application/json", "not valid JSON"),
        (b"\xff\xfe", "application/json", "not valid JSON"),
        (b"[1, 2]", "application/json", "must be a JSON object"),
        (b"prompt=x", "application/x-www-form-urlencoded", "not valid JSON"),
        (b'{"prompt": 5}', "application/json", "prompt"),
    ],
)
def test_bad_bodies_answer_400_in_openai_shape(url, content, content_type, says):
    r = httpx.post(f"{url}/v1/completions", content=content, headers={"content-type": content_type}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert says in r.json()["error"]["message"]


def test_openapi_documents_the_request_bodies(url):
    spec = httpx.get(f"{url}/openapi.json", timeout=30).json()
    for path, model in (
        ("/v1/chat/completions", "ChatCompletionRequest"),
        ("/v1/completions", "CompletionRequest"),
        ("/tokenize", "TokenizeRequest"),
        ("/detokenize", "DetokenizeRequest"),
    ):
        ref = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref == f"#/components/schemas/{model}"
    schemas = spec["components"]["schemas"]
    assert "messages" in schemas["ChatCompletionRequest"]["properties"] and "ChatMessage" in schemas


@pytest.mark.parametrize(
    "content, says, param",
    [
        (b'{"prompt": "' + b"x" * YIELDING_PARSE_BYTES + b'", "stop": ' + b"[" * 70 + b"]" * 70 + b"}", "64", "stop"),
        (b'{"prompt": "' + b"x" * YIELDING_PARSE_BYTES + b'"', "not valid JSON", None),
    ],
    ids=["too deep", "not JSON"],
)
def test_big_bodies_take_the_yielding_parse_and_answer_as_small_ones(url, monkeypatch, content, says, param):
    calls = []
    real = body.loads_yielding
    monkeypatch.setattr(body, "loads_yielding", lambda raw, depth: calls.append(len(raw)) or real(raw, depth))
    r = httpx.post(f"{url}/v1/completions", content=content, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 400 and says in r.json()["error"]["message"], r.text
    assert r.json()["error"]["param"] == param and calls == [len(content)]
