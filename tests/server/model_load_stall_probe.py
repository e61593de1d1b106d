"""How much one model's load holds up another model's stream (a measurement, not a test).

`tinyllm serve` (no --model) runs in a child process with a models folder holding a second copy of the default
model's file, so the server has two models: `smollm2:135m` (loaded at start-up) and `copy` (loaded on first use,
its KV pool written as it loads). A stream on the first model runs alone (the baseline), then again while a
request for `copy` makes it load. Printed: each stream's median and worst gap between chunks, and the load's time.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python tests/server/model_load_stall_probe.py [--kv-memory-gb 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import httpx

from tinyllm.loading.default_model import default_model_path
from tinyllm.server.transport.server_thread import free_port


def stream_gaps(url: str, tokens: int, marks: list[float]) -> list[float]:
    body = {"model": "smollm2:135m", "prompt": "Once upon a time", "max_tokens": tokens, "ignore_eos": True}
    with httpx.Client(timeout=600) as c, c.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                marks.append(time.perf_counter())
    return [b - a for a, b in zip(marks, marks[1:])]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kv-memory-gb", default="1")
    parser.add_argument("--tokens", type=int, default=600)
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    os.symlink(default_model_path(), os.path.join(folder, "copy.gguf"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "TINYLLM_MODELS": folder}
    command = [sys.executable, "-m", "tinyllm", "serve", "--port", str(port), "--kv-memory-gb", args.kv_memory_gb]
    child = subprocess.Popen([*command, "--log-level", "warning"], env=env)
    try:
        while True:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        stream_gaps(url, 20, [])  # warm-up
        baseline = stream_gaps(url, args.tokens, [])
        marks: list[float] = []
        streaming = threading.Thread(target=lambda: during.extend(stream_gaps(url, args.tokens, marks)))
        during: list[float] = []
        streaming.start()
        while len(marks) < 20:
            time.sleep(0.01)
        start = time.perf_counter()
        r = httpx.post(f"{url}/v1/completions", json={"model": "copy", "prompt": "Hi", "max_tokens": 1}, timeout=600)
        loaded = time.perf_counter()
        streaming.join()
        assert r.status_code == 200, r.text
        window = [b - a for a, b in zip(marks, marks[1:]) if start <= b and a <= loaded]
        print(f"load of the second model (first request, answered): {loaded - start:.2f} s")
        for name, gaps in (("alone", baseline), ("while the other loads", window)):
            print(f"{name}: median gap {statistics.median(gaps):.4f} s, worst {max(gaps):.4f} s over {len(gaps)} gaps")
    finally:
        child.terminate()
        child.wait(30)


if __name__ == "__main__":
    main()
