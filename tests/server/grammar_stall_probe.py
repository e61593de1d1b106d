"""How long a constrained request delays everyone else (a measurement, not a test).

The server runs in a child process on the default model. While a greedy stream runs and /health is polled
every 20 ms, each hostile constrained request below is sent (the first one is a plain structured request,
the first after start); printed per request: its status and time, and the longest gap between the other
stream's chunks and between /health answers in the window around it.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python tests/server/grammar_stall_probe.py
"""

from __future__ import annotations

import json
import sys
import threading
import time

import httpx
from stall_probe import child_server

POLL_S = 0.02
CHAT = "/v1/chat/completions"


def serve(port: int) -> None:
    import torch

    from tinyllm import LLM
    from tinyllm.server import create_app
    from tinyllm.server.transport.server_thread import ServerThread

    torch.set_num_threads(1)
    with ServerThread(create_app(LLM()), port=port):
        threading.Event().wait()


def longest_gap(times: list[float], start: float, end: float) -> float:
    inside = [t for t in times if start <= t <= end]
    return max((b - a for a, b in zip(inside, inside[1:])), default=float("nan"))


def poll_health(url: str, times: list[float], done: threading.Event) -> None:
    with httpx.Client(timeout=120) as c:
        while not done.is_set():
            c.get(f"{url}/health")
            times.append(time.perf_counter())
            time.sleep(POLL_S)


def run_stream(url: str, times: list[float], done: threading.Event) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 8000, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=120) as c, c.stream("POST", f"{url}/v1/completions", json=body) as r:
        for _ in r.iter_lines():
            times.append(time.perf_counter())
            if done.is_set():
                break


def chat(extra: dict, content: str = "Answer in JSON.") -> dict:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 64, "temperature": 0, **extra}


def tool(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


PROBES = {
    "plain request (the baseline)": chat({}, "Say hello."),
    "first structured request": chat({"response_format": {"type": "json_object"}}),
    "tool whose parameters refer to themselves": chat(
        {
            "tools": [tool("f", {"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]})],
            "tool_choice": "required",
        }
    ),
    "guided_regex a{100000}": chat({"guided_regex": "a{100000}"}),
    "json_schema pattern ^(a+)+$": chat(
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": {"type": "string", "pattern": "^(a+)+$"}},
            }
        }
    ),
    "GBNF of 20,000 alternatives": chat({"grammar": "root ::= " + " | ".join(f'"w{i}"' for i in range(20000))}),
    "guided_choice of 20,000 strings": chat({"guided_choice": [f"choice {i}" for i in range(20000)]}),
    "5,000 tools, tool_choice required": chat(
        {"tools": [tool(f"f{i}", {"type": "object"}) for i in range(5000)], "tool_choice": "required"}
    ),
}


def probe(url: str, name: str, body: dict) -> None:
    health, chunks, done = [], [], threading.Event()
    threads = [
        threading.Thread(target=f, args=(url, t, done)) for f, t in ((poll_health, health), (run_stream, chunks))
    ]
    for t in threads:
        t.start()
    time.sleep(1.0)
    start = time.perf_counter()
    try:
        r = httpx.post(f"{url}{CHAT}", json=body, timeout=120)
        status = str(r.status_code)
        detail = r.text[:100].replace("\n", " ")
    except httpx.TimeoutException:
        status, detail = "no answer in 120 s", ""
    answered = time.perf_counter()
    time.sleep(1.0)
    done.set()
    for t in threads:
        t.join()
    window = (start - 0.5, time.perf_counter())
    print(
        f"{name}: {len(json.dumps(body))} B -> {status} in {answered - start:.2f} s; longest gap: "
        f"stream {longest_gap(chunks, *window):.3f} s, /health {longest_gap(health, *window):.3f} s | {detail}",
        flush=True,
    )


def main() -> None:
    with child_server(__file__) as url:
        for name in sys.argv[1:] or PROBES:
            probe(url, name, PROBES[name])


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(int(sys.argv[2]))
    else:
        main()
