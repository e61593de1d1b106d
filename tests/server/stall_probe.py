"""How long a refused, oversized request freezes the server (a measurement, not a test).

The server runs in a child process on a tiny random model with an 8192-token context. While a stream
runs and /health is polled every 20 ms, a body of 400,000 chat messages and one of 4 million token ids
are sent; each must be a 400. Printed: the longest gap between /health answers and between stream
chunks in the window around each body.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python tests/server/stall_probe.py
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time

import httpx

from tinyllm.loading.gguf_tokenizer import gguf_tokenizer

CONTEXT = 8192
POLL_S = 0.02


def serve(port: int) -> None:
    import torch

    from tinyllm import LLM
    from tinyllm.loading.default_model import default_model_path
    from tinyllm.server import create_app
    from tinyllm.server.transport.server_thread import ServerThread

    sys.path.insert(0, "tests")
    from helpers.tiny_models import tiny_llama

    torch.set_num_threads(1)
    tok = gguf_tokenizer(default_model_path())
    llm = LLM.from_parts(tiny_llama(0, vocab_size=tok.vocab_size, max_position_embeddings=CONTEXT), tok)
    with ServerThread(create_app(llm, num_blocks=1024), port=port):
        threading.Event().wait()


def longest_gap(times: list[float], start: float, end: float) -> float:
    inside = [t for t in times if start <= t <= end]
    return max((b - a for a, b in zip(inside, inside[1:])), default=float("nan"))


def poll_health(url: str, times: list[float], done: threading.Event) -> None:
    with httpx.Client(timeout=60) as c:
        while not done.is_set():
            c.get(f"{url}/health")
            times.append(time.perf_counter())
            time.sleep(POLL_S)


def run_stream(url: str, times: list[float], done: threading.Event) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=60) as c, c.stream("POST", f"{url}/v1/completions", json=body) as r:
        for _ in r.iter_lines():
            times.append(time.perf_counter())
            if done.is_set():
                break


def probe(url: str, name: str, raw: bytes) -> None:
    health, chunks, done = [], [], threading.Event()
    threads = [
        threading.Thread(target=f, args=(url, t, done)) for f, t in ((poll_health, health), (run_stream, chunks))
    ]
    for t in threads:
        t.start()
    time.sleep(1.0)
    start = time.perf_counter()
    r = httpx.post(f"{url}/v1/{name}", content=raw, timeout=120, headers={"content-type": "application/json"})
    answered = time.perf_counter()
    time.sleep(1.0)
    done.set()
    for t in threads:
        t.join()
    end = time.perf_counter()
    window = (start - 0.5, end)
    print(
        f"{name}: {len(raw) / 1e6:.1f} MB -> {r.status_code} in {answered - start:.2f} s; longest gap: "
        f"/health {longest_gap(health, *window):.3f} s, stream {longest_gap(chunks, *window):.3f} s"
    )


@contextlib.contextmanager
def child_server(script: str, *args: str):
    """`python script serve PORT *args` in a child process, until its /health says 200; yields its URL."""
    from tinyllm.server.transport.server_thread import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    child = subprocess.Popen([sys.executable, script, "serve", str(port), *args])
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        yield url
    finally:
        child.terminate()
        child.wait(30)


def main() -> None:
    with child_server(__file__) as url:
        messages = json.dumps({"messages": [{"role": "user", "content": "x"}] * 400_000}).encode()
        ids = json.dumps({"prompt": [1] * 4_000_000}, separators=(",", ":")).encode()
        for name, raw in (("chat/completions", messages), ("completions", ids)):
            probe(url, name, raw)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(int(sys.argv[2]))
    else:
        main()
