"""A server of several models (server/model_slots.py, state.py): each request names its model, which loads on first
use in the background without holding up another model's streams, unloads after its keep_alive (Ollama's
`keep_alive`, 0 included) or for room (max_loaded, least recently used first), and never while a request uses it."""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.model_slots import ModelSource, SlotLimits
from tinyllm.server.transport.server_thread import ServerThread


class Loader:
    """Loads a tiny random model (its own seed), counting loads; `gate` (when given) holds each load until set."""

    def __init__(self, tokenizer, seed: int, gate: threading.Event | None = None):
        self.tokenizer, self.seed, self.gate = tokenizer, seed, gate
        self.loads, self.started = 0, threading.Event()
        self.llms: list = []

    def __call__(self):
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(60), "the test never opened the gate"
        self.loads += 1
        model = tiny_llama(self.seed, vocab_size=self.tokenizer.vocab_size, max_position_embeddings=1024)
        self.llms.append(LLM.from_parts(model, self.tokenizer))
        return self.llms[-1]


def served(tokenizer, limits: SlotLimits | None = None, beta_keep: float | None = 300.0, gate=None):
    alpha, beta = Loader(tokenizer, 11), Loader(tokenizer, 12, gate)
    sources = [
        ModelSource("alpha", load=alpha, aliases=frozenset({"alpha.gguf"}), preload=True),
        ModelSource("beta:tiny", load=beta, aliases=frozenset(), keep_alive_s=beta_keep),
    ]
    app = create_app(models=sources, slot_limits=limits, num_blocks=128)
    return ServerThread(app), alpha, beta


def chat(c: httpx.Client, model: str, **extra) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "seed": 1, **extra}
    return c.post("/v1/chat/completions", json=body)


def loaded(c: httpx.Client) -> list[str]:
    return sorted(m["name"] for m in c.get("/api/ps").json()["models"])


def wait_for(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.05)


@pytest.fixture
def two(smollm_tokenizer, one_thread):
    srv, alpha, beta = served(smollm_tokenizer)
    with srv, httpx.Client(base_url=srv.wait_ready().url, timeout=60) as c:
        yield c, alpha, beta


@pytest.mark.slow
def test_each_model_answers_by_its_name_and_loads_on_first_use(two):
    c, alpha, beta = two
    assert (alpha.loads, beta.loads) == (1, 0) and loaded(c) == ["alpha"]
    assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["alpha", "beta:tiny"]
    assert sorted(m["name"] for m in c.get("/api/tags").json()["models"]) == ["alpha", "beta:tiny"]
    a, b = chat(c, "alpha"), chat(c, "beta:tiny")
    assert a.status_code == b.status_code == 200 and (a.json()["model"], b.json()["model"]) == ("alpha", "beta:tiny")
    assert (alpha.loads, beta.loads) == (1, 1) and loaded(c) == ["alpha", "beta:tiny"]
    # Each model answers with its own weights: the same seeded request, each model's own tokens.
    want_a = alpha.llms[0].chat([{"role": "user", "content": "Hi"}], max_tokens=4, seed=1).text
    want_b = beta.llms[0].chat([{"role": "user", "content": "Hi"}], max_tokens=4, seed=1).text
    got = (a.json()["choices"][0]["message"]["content"], b.json()["choices"][0]["message"]["content"])
    assert got == (want_a, want_b) and want_a != want_b
    # The alias, Ollama's ":latest" and a request without a model (the first model) reach theirs.
    assert chat(c, "alpha.gguf").json()["model"] == "alpha"
    latest = {"model": "beta:tiny:latest", "prompt": "x", "stream": False}
    assert c.post("/api/generate", json=latest).json()["model"] == "beta:tiny"
    assert c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1}).json()["model"] == "alpha"


def test_a_model_not_served_is_a_404_naming_those_that_are(two):
    c, _, beta = two
    r = chat(c, "gamma")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert "'gamma'" in r.json()["error"]["message"] and "'alpha', 'beta:tiny'" in r.json()["error"]["message"]
    r = c.post("/api/chat", json={"model": "gamma", "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 404 and "not found" in r.json()["error"]
    assert c.get("/v1/models/gamma").status_code == 404 and beta.loads == 0


@pytest.mark.slow
def test_keep_alive_zero_unloads_after_the_request_and_a_bare_request_unloads_at_once(two):
    c, alpha, beta = two
    body = {"model": "beta:tiny", "prompt": "Hi", "stream": False, "keep_alive": 0, "options": {"num_predict": 2}}
    assert c.post("/api/generate", json=body).status_code == 200
    wait_for(lambda: loaded(c) == ["alpha"], "beta to unload")
    engine = beta.llms[0]
    assert beta.loads == 1 and engine is not None
    # Ollama's unload request: keep_alive 0 and nothing to generate; answered without loading anything.
    r = c.post("/api/chat", json={"model": "alpha", "messages": [], "keep_alive": "0s"})
    assert r.status_code == 200 and (r.json()["done_reason"], r.json()["model"]) == ("unload", "alpha")
    wait_for(lambda: loaded(c) == [], "alpha to unload")
    assert c.get("/health").json()["loaded"] == []
    # Both load again when next asked.
    assert chat(c, "alpha").status_code == chat(c, "beta:tiny").status_code == 200
    assert (alpha.loads, beta.loads) == (2, 2)


@pytest.mark.slow
def test_an_idle_model_unloads_when_its_keep_alive_runs_out_and_ps_says_when(smollm_tokenizer, one_thread):
    srv, _, beta = served(smollm_tokenizer, beta_keep=300.0)
    with srv, httpx.Client(base_url=srv.wait_ready().url, timeout=60) as c:
        assert chat(c, "beta:tiny").status_code == 200
        ps = {m["name"]: m["expires_at"] for m in c.get("/api/ps").json()["models"]}
        assert ps["alpha"].startswith("2999") and ps["beta:tiny"][:4] not in ("2999", "")
        body = {"model": "beta:tiny", "prompt": "Hi", "stream": False, "keep_alive": "1s"}
        assert c.post("/api/generate", json={**body, "options": {"num_predict": 1}}).status_code == 200
        wait_for(lambda: loaded(c) == ["alpha"], "beta to unload after its 1 s")
        assert beta.loads == 1


@pytest.mark.slow
def test_the_least_recently_used_idle_model_makes_room(smollm_tokenizer, one_thread):
    srv, alpha, beta = served(smollm_tokenizer, SlotLimits(max_loaded=1))
    with srv, httpx.Client(base_url=srv.wait_ready().url, timeout=60) as c:
        first = alpha.llms[0]
        assert chat(c, "beta:tiny").status_code == 200 and loaded(c) == ["beta:tiny"]
        assert chat(c, "alpha").status_code == 200 and loaded(c) == ["alpha"]
        assert (alpha.loads, beta.loads) == (2, 1) and alpha.llms[1] is not first
        assert c.get("/health").json()["loaded"] == ["alpha"]


@pytest.mark.slow
def test_a_model_in_use_is_not_unloaded_for_another(smollm_tokenizer, one_thread):
    srv, alpha, beta = served(smollm_tokenizer, SlotLimits(max_loaded=1, wait_s=0))
    with srv, httpx.Client(base_url=srv.wait_ready().url, timeout=60) as c:
        body = {"model": "alpha", "prompt": "Hi", "max_tokens": 400, "ignore_eos": True, "stream": True}
        with c.stream("POST", "/v1/completions", json=body) as stream:
            lines = stream.iter_lines()
            assert next(lines).startswith("data: ")  # alpha streams: it holds its model
            r = chat(c, "beta:tiny")
            assert r.status_code == 503 and r.headers["retry-after"] == "5" and beta.loads == 0
            rest = [line for line in lines if line.startswith("data: ")]
        assert rest[-1] == "data: [DONE]"
        wait_for(lambda: chat(c, "beta:tiny").status_code == 200, "beta to load once alpha is idle")
        assert loaded(c) == ["beta:tiny"]


@pytest.mark.slow
def test_a_model_loading_does_not_hold_up_another_models_stream(smollm_tokenizer, one_thread):
    gate = threading.Event()
    srv, _, beta = served(smollm_tokenizer, gate=gate)
    with srv, httpx.Client(base_url=srv.wait_ready().url, timeout=60) as c, ThreadPoolExecutor(1) as pool:
        body = {"model": "alpha", "prompt": "Hi", "max_tokens": 300, "ignore_eos": True, "stream": True}
        with c.stream("POST", "/v1/completions", json=body) as stream:
            lines = stream.iter_lines()
            assert next(lines).startswith("data: ")
            waiting = pool.submit(chat, c, "beta:tiny")
            assert beta.started.wait(30)  # beta's load has begun, and waits on the gate
            events = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
        # alpha's stream ran to its end while beta was still loading.
        assert sum(len(e["choices"][0]["text"]) > 0 for e in events) >= 250
        assert not waiting.done() and beta.loads == 0
        assert c.get("/health").status_code == 200
        gate.set()
        assert waiting.result(60).status_code == 200 and beta.loads == 1


def test_a_huge_model_name_is_clipped_in_the_404(two):
    c, _, beta = two
    r = chat(c, "x" * 100_000)
    assert r.status_code == 404 and len(r.json()["error"]["message"]) < 1000 and "more)" in r.json()["error"]["message"]
    assert beta.loads == 0
