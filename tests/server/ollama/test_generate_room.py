"""/api/generate's room checks and `context` on a served tiny model: a raw prompt too long in characters or tokens,
longer than options.num_ctx, or leaving no room for num_predict after a previous `context` is a 400 naming the
field; a raw prompt's answer runs to the end of options.num_ctx and returns the conversation's ids. Also what the
Ollama routes answer around that: a chat's answer has no `context`, a refused message is named by its index, a body
too large is a 413 in Ollama's shape, managing models is a 501, and the routes stay out of the OpenAPI schema."""

import json
import re

import httpx
import pytest

from helpers.live_server import tiny_llm
from tinyllm.server import create_app
from tinyllm.server.checks.admission import max_token_chars
from tinyllm.server.transport.server_thread import ServerThread


@pytest.fixture(scope="module")
def server(smollm_tokenizer, one_thread):
    llm = tiny_llm(smollm_tokenizer)
    with ServerThread(create_app(llm, served_model_name="tiny", num_blocks=64)) as srv:
        yield srv.wait_ready().url, smollm_tokenizer


def generate(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/api/generate", json={"model": "tiny", "stream": False, **body}, timeout=60)


def refused(url: str, **body) -> str:
    r = generate(url, **body)
    assert r.status_code == 400, r.text
    return r.json()["error"]


def test_a_raw_prompt_too_long_is_a_400_naming_prompt(server):
    url, tokenizer = server
    chars = 1024 * max_token_chars(tokenizer) + 1
    assert refused(url, prompt="a" * chars, raw=True).startswith(f"prompt has {chars} characters, more than any")
    ids = len(tokenizer.encode(" hello" * 30))
    message = refused(url, prompt=" hello" * 30, raw=True, context=[5] * 1000)
    assert message == f"prompt has {1000 + ids} tokens, but the model's context length is 1024 (at most 1023 leave " \
        "room for one new token)"  # fmt: skip


def test_a_raw_prompt_longer_than_num_ctx_is_a_400(server):
    url, tokenizer = server
    ids = len(tokenizer.encode(" hello" * 10))
    message = refused(url, prompt=" hello" * 10, raw=True, options={"num_ctx": 8})
    assert message == f"prompt has {ids} tokens, but options.num_ctx is 8 (at most 7 leave room for one new token)"


def test_a_raw_prompt_one_short_of_num_ctx_gets_one_token_and_a_full_one_is_refused(server):
    url, tokenizer = server
    num_ctx = 3 + len(tokenizer.encode(" hello")) + 1  # a context of 3 ids, the prompt, one position left
    options = {"num_ctx": num_ctx, "temperature": 0}
    r = generate(url, prompt=" hello", raw=True, options=options, context=[5, 6, 7])
    assert r.status_code == 200, r.text
    assert (r.json()["eval_count"], r.json()["done_reason"]) == (1, "length")
    message = refused(url, prompt=" hello", raw=True, options=options, context=[5, 6, 7, 8])
    assert message == (
        f"prompt has {num_ctx} tokens, but options.num_ctx is {num_ctx} (at most {num_ctx - 1} leave room for one "
        "new token)"
    )


def test_a_raw_answer_runs_to_num_ctx_and_returns_its_context(server):
    url, tokenizer = server
    prompt_ids = tokenizer.encode(" hello there")
    r = generate(url, prompt=" hello there", raw=True, options={"num_ctx": 12, "temperature": 0}, context=[5, 6])
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["prompt_eval_count"], body["eval_count"]) == (2 + len(prompt_ids), 10 - len(prompt_ids))
    assert body["done_reason"] == "length"
    assert body["context"][: 2 + len(prompt_ids)] == [5, 6, *prompt_ids]
    assert len(body["context"]) == 12


def test_a_context_with_no_room_left_is_a_400_naming_it(server):
    url, _ = server
    assert re.fullmatch(
        r"context has \d+ tokens, but the model's context length is 1024 \(at most 1023 leave room for one new token\)",
        refused(url, prompt="Hi", context=[5] * 1020),
    )
    assert re.fullmatch(
        r"the prompt has 9\d\d tokens and options.num_predict is 100, more than the model's context length of 1024 "
        r"tokens",
        refused(url, prompt="Hi", context=[5] * 950, options={"num_predict": 100}),
    )


def test_a_chat_generate_returns_its_context(server):
    url, _ = server
    body = generate(url, prompt="Hi", options={"num_predict": 2, "temperature": 0}, context=[5, 6]).json()
    assert body["context"][:2] == [5, 6] and len(body["context"]) == body["prompt_eval_count"] + body["eval_count"]


def test_each_streamed_piece_carries_its_logprobs(server):
    url, _ = server
    body = {"model": "tiny", "prompt": "Hi", "logprobs": True, "options": {"num_predict": 3, "temperature": 0}}
    with httpx.stream("POST", f"{url}/api/generate", json=body, timeout=60) as r:
        lines = [json.loads(line) for line in r.iter_lines() if line]
    *pieces, last = lines
    assert last["done"] is True and last["eval_count"] == 3 and last["response"] == ""
    assert sum(len(p["logprobs"]) for p in pieces) == 3
    assert all(p["done"] is False and {"token", "logprob"} <= p["logprobs"][0].keys() for p in pieces)


def test_a_raw_answer_without_num_ctx_runs_to_the_models_context(server):
    url, tokenizer = server
    prompt_ids = tokenizer.encode(" hello there")
    r = generate(url, prompt=" hello there", raw=True, options={"temperature": 0}, context=[5] * 1000)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["eval_count"], body["done_reason"]) == (1024 - 1000 - len(prompt_ids), "length")


def test_a_streamed_body_too_large_is_a_413_in_ollamas_shape(server):
    def chunks():  # no content-length: the limit is met while the route reads the body
        for _ in range(17):
            yield b" " * (1 << 20)

    r = httpx.post(f"{server[0]}/api/chat", content=chunks(), headers={"content-type": "application/json"}, timeout=60)
    assert (r.status_code, r.json()) == (413, {"error": "the request body is larger than 16777216 bytes"})


def test_a_chat_answer_returns_no_context(server):
    body = {
        "model": "tiny",
        "stream": False,
        "messages": [{"role": "user", "content": "hi"}],
        "options": {"num_predict": 2},
    }
    r = httpx.post(f"{server[0]}/api/chat", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["done"] is True and "context" not in r.json()


def test_a_message_refused_is_named_by_its_index(server):
    messages = [{"role": "user", "content": "hi"}, {"role": "user", "content": "x", "thinking": "hmm"}]
    r = httpx.post(f"{server[0]}/api/chat", json={"model": "tiny", "stream": False, "messages": messages}, timeout=60)
    assert (r.status_code, r.json()) == (
        400,
        {"error": "messages[1].thinking is not supported: this model does not reason"},
    )


def test_ollamas_routes_are_not_in_the_openapi_schema(server):
    paths = httpx.get(f"{server[0]}/openapi.json").json()["paths"]
    assert "/v1/chat/completions" in paths and not [p for p in paths if p.startswith("/api/")]


@pytest.mark.parametrize(("method", "name"), [("POST", "pull"), ("DELETE", "delete"), ("HEAD", "copy")])
def test_managing_models_is_a_501_naming_the_route(server, method, name):
    r = httpx.request(method, f"{server[0]}/api/{name}")
    assert r.status_code == 501
    if method != "HEAD":
        assert r.json() == {
            "error": f"/api/{name} is not supported: models are managed on the server's machine with tinyllm pull, "
            "list and rm, and the server serves the models it found when it started"
        }
