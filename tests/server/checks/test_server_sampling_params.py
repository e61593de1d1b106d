"""vLLM's min_tokens on chat and completions: no stop token id, stop string or end of text before that many
tokens (the greedy answer runs on past the stop it would have taken), and a value that cannot hold is a 400
naming min_tokens."""

import httpx
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

CHAT = [{"role": "user", "content": "Count."}]


@pytest.fixture(scope="module")
def served(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(6, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=256), smollm_tokenizer
    )
    with ServerThread(create_app(llm, num_blocks=64)) as srv:
        yield llm, srv.wait_ready().url


def post(url, path, body):
    return httpx.post(f"{url}{path}", json=body, timeout=120)


@pytest.mark.parametrize(
    "path, body, words",
    [
        ("/v1/completions", {"prompt": "x", "min_tokens": -1}, "min_tokens must be an integer >= 0, got -1"),
        ("/v1/completions", {"prompt": "x", "min_tokens": 17}, "more than max_tokens (16)"),  # the default 16
        ("/v1/chat/completions", {"messages": CHAT, "min_tokens": 5, "max_tokens": 4}, "more than max_tokens (4)"),
        (
            "/v1/chat/completions",
            {"messages": CHAT, "min_tokens": 5, "max_completion_tokens": 4},
            "more than max_completion_tokens (4)",
        ),
        ("/v1/completions", {"prompt": "x", "min_tokens": "3"}, "min_tokens"),
    ],
)
def test_min_tokens_that_cannot_hold_is_a_400_naming_it(served, path, body, words):
    r = post(served[1], path, body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "min_tokens" and words in r.json()["error"]["message"]


def test_min_tokens_holds_back_every_stop(served):
    llm, url = served
    ids = llm.tokenizer.encode("The river")
    first = llm.generate(ids, temperature=0, max_tokens=1, ignore_eos=True).ids[0]
    base = {"prompt": ids, "temperature": 0, "max_tokens": 8, "stop_token_ids": [first]}
    stopped = post(url, "/v1/completions", base).json()
    assert stopped["usage"]["completion_tokens"] <= 1 and stopped["choices"][0]["finish_reason"] == "stop"
    held = post(url, "/v1/completions", {**base, "min_tokens": 5}).json()
    assert held["usage"]["completion_tokens"] >= 5
    alone = llm.generate(ids, temperature=0, max_tokens=8, stop_token_ids=[first], min_tokens=5)
    assert held["choices"][0]["text"] == alone.text  # the library's min_tokens, through the server's field
    text = alone.text
    by_string = post(url, "/v1/completions", {**base, "stop_token_ids": [], "stop": [text[:1]], "min_tokens": 4})
    assert by_string.json()["usage"]["completion_tokens"] >= 4
    chat = post(url, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 6, "min_tokens": 6, "temperature": 0})
    assert chat.json()["usage"]["completion_tokens"] == 6
