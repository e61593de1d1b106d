"""32 concurrent streaming clients, a third of them hanging up mid-stream: the others' answers are exactly
their non-streamed twins', and afterwards no request runs and no KV block is held. A non-streaming
client that hangs up is aborted too."""

import asyncio
import json
import re
import time

import httpx
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

CLIENTS = 32


@pytest.fixture(scope="module")
def url(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(2, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=512), smollm_tokenizer
    )
    app = create_app(llm, num_blocks=512, max_num_seqs=CLIENTS, max_num_batched_tokens=512)
    with ServerThread(app) as srv:
        yield srv.wait_ready().url


def metric(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.M)
    assert match, f"{name}{labels} is not in /metrics"
    return float(match.group(1))


def wait_idle(url: str, timeout: float = 15.0) -> str:
    """/metrics once no request runs or waits and no block is held (aborts land asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        text = httpx.get(f"{url}/metrics").text
        busy = [
            metric(text, n) for n in ("tinyllm_requests_running", "tinyllm_requests_waiting", "tinyllm_kv_blocks_used")
        ]
        if busy == [0, 0, 0]:
            return text
        assert time.monotonic() < deadline, f"still busy after {timeout} s: {busy}"
        time.sleep(0.05)


def request(i: int) -> tuple[str, dict, bool]:
    """Client i's endpoint, body and whether it hangs up: chat and completions alternate; every third
    client asks for a long answer (ignoring EOS, so it cannot end early) and leaves after 3 chunks."""
    leaves = i % 3 == 0
    common = dict(
        max_tokens=400 if leaves else 12, seed=1000 + i, ignore_eos=leaves, stream_options={"include_usage": True}
    )
    if i % 2:
        return "/v1/completions", dict(common, prompt=f"Story number {i} begins"), leaves
    return "/v1/chat/completions", dict(common, messages=[{"role": "user", "content": f"Tell story {i}."}]), leaves


async def stream_one(client: httpx.AsyncClient, i: int) -> dict:
    path, body, leaves = request(i)
    chunks = []
    async with client.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunks.append(json.loads(line[6:]))
            if leaves and len(chunks) >= 3:
                break  # leaving the block closes the connection mid-stream
    return {"chunks": chunks, "leaves": leaves}


def text_of(chunk: dict) -> str:
    choice = chunk["choices"][0]
    return choice["delta"].get("content", "") if "delta" in choice else choice["text"]


async def twin(client: httpx.AsyncClient, i: int) -> dict:
    path, body, _ = request(i)
    body = {k: v for k, v in body.items() if k != "stream_options"}  # a 400 without stream, as OpenAI's
    r = await client.post(path, json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def run_clients(url: str):
    limits = httpx.Limits(max_connections=2 * CLIENTS)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        streams = await asyncio.gather(*(stream_one(client, i) for i in range(CLIENTS)))
        stayed = [i for i in range(CLIENTS) if not streams[i]["leaves"]]
        twins = await asyncio.gather(*(twin(client, i) for i in stayed))
    return streams, dict(zip(stayed, twins))


def test_concurrent_streams_with_hangups(url):
    aborted_before = metric(
        httpx.get(f"{url}/metrics").text, "tinyllm_requests_finished_total", '{finish_reason="abort"}'
    )
    streams, twins = asyncio.run(run_clients(url))
    for i, whole in twins.items():
        chunks = streams[i]["chunks"]
        body = [c for c in chunks if c["choices"]]
        choice = whole["choices"][0]
        assert "".join(text_of(c) for c in body) == choice.get("text", choice.get("message", {}).get("content"))
        finishes = [c["choices"][0]["finish_reason"] for c in body if c["choices"][0]["finish_reason"]]
        assert finishes == [choice["finish_reason"]]
        assert chunks[-1]["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]
    text = wait_idle(url)
    leavers = sum(s["leaves"] for s in streams)
    aborted = metric(text, "tinyllm_requests_finished_total", '{finish_reason="abort"}') - aborted_before
    assert aborted == leavers == 11


def test_a_non_streaming_client_that_hangs_up_is_aborted(url):
    before = metric(httpx.get(f"{url}/metrics").text, "tinyllm_requests_finished_total", '{finish_reason="abort"}')
    body = dict(prompt="A very long story", max_tokens=480, ignore_eos=True, seed=1)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/completions", json=body, timeout=httpx.Timeout(5.0, read=0.2))
    text = wait_idle(url)
    assert metric(text, "tinyllm_requests_finished_total", '{finish_reason="abort"}') == before + 1
    assert httpx.get(f"{url}/health").json()["kv_blocks"]["used"] == 0
