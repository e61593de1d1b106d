"""How much embedding storms delay the others (a measurement, not a test), and what one embedding request costs.

The server runs in a child process on the default model (one torch thread). Measured alone, then while storms of
embeddings run: the worst gap between a plain stream's chunks and the latency of a 2-token chat request. The
storm: 44 clients sending one short text after another, two requests of 2,000 one-id inputs, one of a single
2,000-id input, and one of 2,000 inputs whose client leaves after a second. The goal: a worst gap within 4x its
baseline + 1 s.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python tests/server/embed_stall_probe.py [--embedding-batch-tokens N]
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python tests/server/embed_stall_probe.py cost 4x256 16x256 1x1024 1x2048

`cost NxL ...`: seconds one request of N inputs of L tokens takes on the embedding queue, alone, in process.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time

import httpx
from stall_probe import child_server

STREAM_TOKENS = 48
SMALL_CLIENTS = 44  # more than the 40 threads Starlette lends handlers: none of them may wait holding one


def serve(port: int, batch_tokens: int) -> None:
    import torch

    from tinyllm import LLM
    from tinyllm.engine.embedding_queue import EmbeddingLimits
    from tinyllm.server import create_app
    from tinyllm.server.transport.server_thread import ServerThread

    torch.set_num_threads(1)
    limits = EmbeddingLimits(batch_tokens=batch_tokens)
    with ServerThread(create_app(LLM(), embedding_limits=limits), port=port):
        threading.Event().wait()


def stream_gaps(url: str) -> tuple[float, float]:
    """The worst gap between chunks of a plain stream (after its first), and the whole stream's seconds."""
    body = {"prompt": "Once upon a time", "max_tokens": STREAM_TOKENS, "ignore_eos": True, "stream": True}
    times = []
    start = time.perf_counter()
    with httpx.Client(timeout=600) as c, c.stream("POST", f"{url}/v1/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                times.append(time.perf_counter())
    return max(b - a for a, b in zip(times, times[1:])), time.perf_counter() - start


def chat_s(url: str) -> float:
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    start = time.perf_counter()
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600)
    assert r.status_code == 200, r.text
    return time.perf_counter() - start


def measure(url: str) -> dict:
    gap, whole = stream_gaps(url)
    chats = [chat_s(url) for _ in range(3)]
    return {"gap": gap, "stream": whole, "chat": max(chats)}


def small_client(url: str, latencies: list, statuses: list, stop: threading.Event) -> None:
    with httpx.Client(timeout=600) as c:
        while not stop.is_set():
            start = time.perf_counter()
            r = c.post(f"{url}/v1/embeddings", json={"input": "a short text"})
            statuses.append(r.status_code)
            latencies.append(time.perf_counter() - start)


def large(url: str, name: str, body: dict, results: dict, timeout: float = 900) -> None:
    start = time.perf_counter()
    try:
        r = httpx.post(f"{url}/v1/embeddings", json=body, timeout=timeout)
        results[name] = f"{r.status_code} in {time.perf_counter() - start:.1f} s"
    except httpx.TimeoutException:
        results[name] = f"left after {time.perf_counter() - start:.1f} s"


def storm(url: str) -> None:
    measure(url)  # warm up
    httpx.post(f"{url}/v1/embeddings", json={"input": "a short text"}, timeout=600)
    base = measure(url)
    print(
        f"alone: stream worst gap {base['gap']:.3f} s ({STREAM_TOKENS} tokens in {base['stream']:.1f} s), "
        f"2-token chat {base['chat']:.2f} s",
        flush=True,
    )
    stop, latencies, statuses, results = threading.Event(), [], [], {}
    bodies = {
        "2,000 one-id inputs (1)": {"input": [[100 + i % 900] for i in range(2000)]},
        "2,000 one-id inputs (2)": {"input": [[200 + i % 900] for i in range(2000)]},
        "one 2,000-id input": {"input": [[300 + i % 900 for i in range(2000)]]},
    }
    threads = [
        threading.Thread(target=small_client, args=(url, latencies, statuses, stop)) for _ in range(SMALL_CLIENTS)
    ]
    threads += [threading.Thread(target=large, args=(url, name, body, results)) for name, body in bodies.items()]
    leaving = {"input": [[400 + i % 900] * 4 for i in range(2000)]}
    threads.append(
        threading.Thread(target=large, args=(url, "2,000 inputs, client leaves at 1 s", leaving, results, 1))
    )
    for t in threads:
        t.start()
    time.sleep(2.0)
    busy = measure(url)
    stop.set()
    for t in threads:
        t.join()
    goal = 4 * base["gap"] + 1
    verdict = "met" if busy["gap"] <= goal else "NOT met"
    print(
        f"storm: stream worst gap {busy['gap']:.3f} s (goal <= {goal:.3f} s: {verdict}), "
        f"{STREAM_TOKENS} tokens in {busy['stream']:.1f} s, 2-token chat {busy['chat']:.2f} s"
    )
    print(
        f"storm: {len(latencies)} short embeddings, median {statistics.median(latencies):.2f} s, "
        f"worst {max(latencies):.2f} s, statuses {sorted(set(statuses))}"
    )
    for name, result in results.items():
        print(f"storm: {name}: {result}")


def cost(sizes: list[str]) -> None:
    import torch

    from tinyllm import LLM
    from tinyllm.engine.embedding_queue import EmbeddingLimits, EmbeddingQueue
    from tinyllm.model.pooling import Pooling

    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    llm = LLM()
    g = torch.Generator().manual_seed(0)
    queue = EmbeddingQueue(llm.model, EmbeddingLimits(max_request_tokens=1 << 20, max_queued_tokens=1 << 20)).start()

    async def one(n: int, length: int) -> float:
        ids = [torch.randint(100, 40000, (length,), generator=g).tolist() for _ in range(n)]
        start = time.perf_counter()
        await queue.submit(ids, Pooling.MEAN, True).future
        return time.perf_counter() - start

    asyncio.run(one(2, 16))  # warm up
    for size in sizes:
        n, length = (int(x) for x in size.split("x"))
        seconds = asyncio.run(one(n, length))
        print(
            f"{n} x {length} = {n * length} tokens: {seconds:.1f} s ({n * length / seconds:.0f} tokens/s)", flush=True
        )
    queue.close()


def main(batch_tokens: int) -> None:
    with child_server(__file__, str(batch_tokens)) as url:
        print(f"embedding batch tokens: {batch_tokens}; load average before: {os.getloadavg()[0]:.1f}")
        storm(url)
        print(f"load average after: {os.getloadavg()[0]:.1f} (other processes share these cores)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1:2] == ["cost"]:
        cost(sys.argv[2:])
    else:
        main(int(sys.argv[2]) if sys.argv[1:2] == ["--embedding-batch-tokens"] else 64)
