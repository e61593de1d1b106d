"""How long one stream stalls while the batch grows 1 -> 32 on a fresh server (a measurement, not a test).

`tinyllm serve` runs the default model in a child process (the checkout on PYTHONPATH: point it at another
checkout to measure that one). One long stream starts; then another stream joins every STAGGER_S seconds until
32 run. Printed: the start-up line about the KV pool (if the server writes one), the child's resident memory
before the first request and at the end, and the worst and median gap between the first stream's chunks
while the batch grew, with the batch size at the worst gap.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python tests/server/kv_pool_probe.py --kv-memory-gb 2
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time

import httpx

STAGGER_S = 0.5
NUM_STREAMS = 32


def rss_gib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        pages = int(f.read().split()[1])
    import mmap

    return pages * mmap.PAGESIZE / (1 << 30)


def stream(url: str, max_tokens: int, times: list[float], stop: threading.Event) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=600) as c, c.stream("POST", f"{url}/v1/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):  # a chunk (not the blank line after it)
                times.append(time.perf_counter())
            if stop.is_set():
                break


def wait_ready(url: str, child: subprocess.Popen) -> None:
    while child.poll() is None:
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the server exited with status {child.returncode}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kv-memory-gb", default="2")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    url = f"http://127.0.0.1:{args.port}"
    command = [sys.executable, "-m", "tinyllm", "serve", "--port", str(args.port), "--kv-memory-gb", args.kv_memory_gb]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(child.stdout), daemon=True).start()
    try:
        wait_ready(url, child)
        print(*[line.strip() for line in log if "ready" in line], sep="\n", flush=True)
        print(f"resident before the first request: {rss_gib(child.pid):.2f} GiB")
        first: list[float] = []
        stop = threading.Event()
        joins: list[float] = []
        threads = [threading.Thread(target=stream, args=(url, 8000, first, stop))]
        threads[0].start()
        time.sleep(2.0)
        for _ in range(NUM_STREAMS - 1):
            joins.append(time.perf_counter())
            t = threading.Thread(target=stream, args=(url, 400, [], stop))
            t.start()
            threads.append(t)
            time.sleep(STAGGER_S)
        time.sleep(2.0)
        end = time.perf_counter()
        stop.set()
        inside = [t for t in first if joins[0] - 1.0 <= t <= end]
        gaps = [(b - a, b) for a, b in zip(inside, inside[1:])]
        worst, at = max(gaps)
        batch = 1 + sum(j <= at for j in joins)
        print(
            f"first stream while the batch grew 1 -> {NUM_STREAMS}: worst gap {worst:.3f} s (batch ~{batch}), "
            f"median gap {statistics.median(g for g, _ in gaps):.3f} s, {len(gaps)} gaps"
        )
        print(f"resident at the end: {rss_gib(child.pid):.2f} GiB")
        for t in threads:
            t.join(60)
    finally:
        child.terminate()
        child.wait(60)


if __name__ == "__main__":
    main()
