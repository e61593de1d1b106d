"""Server-sent events read raw with httpx: framing, role first, one finish_reason per choice, the usage
chunk, [DONE] last, deltas that add up to the non-streamed answer, and stop strings never streamed."""

import json

import httpx
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

CHAT = [{"role": "user", "content": "Write about bridges."}]


@pytest.fixture(scope="module")
def url(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(1, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=512), smollm_tokenizer
    )
    with ServerThread(create_app(llm, num_blocks=128)) as srv:
        yield srv.wait_ready().url


def sse_events(response: httpx.Response) -> list:
    """Every event's JSON (the last one "[DONE]"), checking the framing on the way."""
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    raw = response.read().decode()
    assert raw.endswith("\n\n")
    events = []
    for block in raw[:-2].split("\n\n"):
        assert block.startswith("data: ") and "\n" not in block, block
        payload = block[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
    return events[:-1]


def stream(url, path, body) -> list:
    with httpx.stream("POST", f"{url}{path}", json={**body, "stream": True}, timeout=60) as r:
        return sse_events(r)


def post(url, path, body) -> dict:
    r = httpx.post(f"{url}{path}", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_chat_stream_shape_and_usage(url):
    body = dict(messages=CHAT, max_tokens=10, seed=7, n=2, stream_options={"include_usage": True})
    chunks = stream(url, "/v1/chat/completions", body)
    whole = post(url, "/v1/chat/completions", {k: v for k, v in body.items() if k != "stream_options"})
    assert {c["id"] for c in chunks} == {chunks[0]["id"]} and {c["created"] for c in chunks} == {chunks[0]["created"]}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert all(c["seed"] == 7 and c["system_fingerprint"].startswith("tinyllm-") for c in chunks)
    for i in range(2):
        mine = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["index"] == i]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        assert all("role" not in m["delta"] for m in mine[1:])
        finishes = [m["finish_reason"] for m in mine if m["finish_reason"] is not None]
        assert len(finishes) == 1 and mine[-1]["finish_reason"] == finishes[0] and mine[-1]["delta"] == {}
        text = "".join(m["delta"].get("content", "") for m in mine)
        assert text == whole["choices"][i]["message"]["content"]
        assert finishes[0] == whole["choices"][i]["finish_reason"]
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]
    assert last["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"]
    assert all(c["usage"] is None for c in chunks[:-1])


def test_no_usage_chunk_unless_asked(url):
    chunks = stream(url, "/v1/chat/completions", dict(messages=CHAT, max_tokens=4, seed=1))
    assert all(c["choices"] for c in chunks)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_completion_deltas_add_up_to_the_whole_text(url, seed, temperature):
    body = dict(prompt="In the valley", max_tokens=20, seed=seed, temperature=temperature, logprobs=1)
    chunks = stream(url, "/v1/completions", body)
    whole = post(url, "/v1/completions", body)["choices"][0]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["text"]
    assert sum(c["choices"][0]["finish_reason"] is not None for c in chunks) == 1
    streamed = [t for c in chunks if c["choices"][0]["logprobs"] for t in c["choices"][0]["logprobs"]["tokens"]]
    assert streamed == whole["logprobs"]["tokens"]
    offsets = [o for c in chunks if c["choices"][0]["logprobs"] for o in c["choices"][0]["logprobs"]["text_offset"]]
    assert offsets == whole["logprobs"]["text_offset"]


@pytest.mark.parametrize("seed", [3, 4, 5, 6])
def test_stop_strings_are_never_streamed(url, seed):
    base = dict(prompt="Across the river", max_tokens=30, seed=seed)
    full = post(url, "/v1/completions", base)["choices"][0]["text"]
    if len(full) < 12:
        pytest.skip("the random model ended early")
    # A stop string spanning several tokens, found in the middle of the text.
    stop = full[len(full) // 3 : len(full) // 3 + 8]
    cut = full[: full.index(stop)]
    chunks = stream(url, "/v1/completions", {**base, "stop": [stop]})
    pieces = [c["choices"][0]["text"] for c in chunks]
    assert "".join(pieces) == cut and chunks[-1]["choices"][0]["finish_reason"] == "stop"
    sent = ""
    for piece in pieces:  # never more than the final text, at any moment
        sent += piece
        assert cut.startswith(sent)


def test_chat_stream_logprobs(url):
    chunks = stream(
        url, "/v1/chat/completions", dict(messages=CHAT, max_tokens=6, seed=2, logprobs=True, top_logprobs=2)
    )
    items = [t for c in chunks if c["choices"][0]["logprobs"] for t in c["choices"][0]["logprobs"]["content"]]
    assert len(items) == 6 or chunks[-1]["choices"][0]["finish_reason"] == "stop"
    # the top 2, plus the sampled token when it is not one of them
    assert all(
        len(t["top_logprobs"]) in (2, 3) and t["token"] in [x["token"] for x in t["top_logprobs"]] for t in items
    )


def test_a_bad_streamed_request_is_a_plain_400(url):
    r = httpx.post(f"{url}/v1/chat/completions", json=dict(messages=CHAT, stream=True, top_p=0))
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["param"] == "top_p"
