"""How long an 8-12 MB request body freezes the server's event loop (a measurement, not a test).

The server of stall_probe.py (a tiny random model in a child process) answers /health every 20 ms and runs a
stream while bodies of many small JSON values (chat messages, token ids, strings), each about 10 MB and under
the body cap, are posted to every route that parses a body. Printed per route: the status, how long the answer
took and the longest gap between /health answers and between stream chunks.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python tests/server/big_body_probe.py
"""

from __future__ import annotations

import json
import sys
import threading
import time

import httpx
from stall_probe import child_server, longest_gap, poll_health, run_stream

MESSAGES = [{"role": "user", "content": "x"}] * 300_000
IDS = [1] * 5_000_000
STRINGS = ["ab"] * 2_000_000
BODIES = {
    "/v1/tokenize": {"prompt": "a small body, for the gaps of a server at rest"},
    "/v1/chat/completions": {"messages": MESSAGES},
    "/v1/completions": {"prompt": IDS},
    "/v1/embeddings": {"input": STRINGS},
    "/api/chat": {"model": "m", "messages": MESSAGES},
    "/api/generate": {"model": "m", "prompt": "x", "context": IDS},
    "/api/embed": {"model": "m", "input": STRINGS},
}


def probe(url: str, path: str, raw: bytes) -> None:
    health, chunks, done = [], [], threading.Event()
    threads = [
        threading.Thread(target=f, args=(url, t, done)) for f, t in ((poll_health, health), (run_stream, chunks))
    ]
    for t in threads:
        t.start()
    time.sleep(1.0)
    start = time.perf_counter()
    r = httpx.post(f"{url}{path}", content=raw, timeout=120, headers={"content-type": "application/json"})
    answered = time.perf_counter()
    time.sleep(1.0)
    done.set()
    for t in threads:
        t.join()
    window = (start - 0.5, time.perf_counter())
    print(
        f"{path}: {len(raw) / 1e6:.1f} MB -> {r.status_code} in {answered - start:.2f} s; longest gap: "
        f"/health {longest_gap(health, *window):.3f} s, stream {longest_gap(chunks, *window):.3f} s",
        flush=True,
    )


def main() -> None:
    with child_server("tests/server/stall_probe.py") as url:
        for path, body in BODIES.items():
            if len(sys.argv) < 2 or path in sys.argv[1:]:
                probe(url, path, json.dumps(body, separators=(",", ":")).encode())


if __name__ == "__main__":
    main()
