"""The HTTP server under N concurrent streaming clients (time to first token, inter-token latency p50/p99,
aggregate output tokens/s), beside the same workload run through the in-process Engine; their ratio is
what HTTP, JSON and server-sent events cost. With --llamacpp-server, llama.cpp's own OpenAI server
(`python -m llama_cpp.server`, the `bench` extra) on the same GGUF file, threads and context serves the same
clients too (it runs one request at a time: llama-cpp-python's server has no parallel slots; it is told to
serve each to its end, where by default it cuts the running stream short when another request arrives).
`--max-num-seqs 1` runs ours one request at a time too.

The server runs in a subprocess (`tinyllm serve` on 127.0.0.1), so the clients' own work does not share
the server's interpreter. Requests are greedy with EOS ignored, so both sides produce the same tokens,
which is checked. Writes serve.json and serve.png."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

from ..cli_flags import PORT, POSITIVE
from . import common
from .workload import drive_engine, make_workload

QUICK = dict(concurrency=[1, 2], prompt_range=[8, 24], output_range=[4, 8])


def add_serve_bench_args(p) -> None:
    p.add_argument(
        "--concurrency",
        type=POSITIVE,
        nargs="+",
        default=[1, 8, 32],
        help="numbers of streaming clients run together (default 1 8 32)",
    )
    p.add_argument("--prompt-range", type=POSITIVE, nargs=2, default=[16, 256], help="prompt tokens, min max")
    p.add_argument("--output-range", type=POSITIVE, nargs=2, default=[64, 64], help="output tokens, min max")
    p.add_argument("--max-batched-tokens", type=POSITIVE, default=256, help="engine token budget per step")
    p.add_argument(
        "--max-num-seqs",
        type=POSITIVE,
        default=None,
        help="sequences our server batches together (default: the largest --concurrency; 1 serves one request "
        "at a time, as llama.cpp's server here does)",
    )
    p.add_argument("--kv-memory-mb", type=POSITIVE, default=1024, help="engine KV pool size (default 1024 MiB)")
    p.add_argument("--startup-timeout", type=float, default=300.0, help="seconds to wait for the server")
    p.add_argument(
        "--port", type=PORT, default=None, help="the port the server listens on, at 127.0.0.1 (default: a free one)"
    )
    p.add_argument(
        "--llamacpp-server", action="store_true", help="also run llama.cpp's OpenAI server on the same GGUF file"
    )


add_args = add_serve_bench_args  # the interface `tinyllm bench` expects of a kind


# ---- the server side


def max_num_seqs(args) -> int:
    return getattr(args, "max_num_seqs", None) or max(args.concurrency)


def server_command(args, port: int) -> list[str]:
    """`tinyllm serve` on 127.0.0.1 with the bench's engine settings."""
    cmd = [
        sys.executable,
        "-m",
        "tinyllm",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        common.model_path(getattr(args, "model", None)),
        "--log-level",
        "warning",
        "--max-num-seqs",
        str(max_num_seqs(args)),
        "--max-num-batched-tokens",
        str(args.max_batched_tokens),
        "--kv-memory-gb",
        str(args.kv_memory_mb / 1024),
    ]
    if getattr(args, "threads", None):
        cmd += ["--threads", str(args.threads)]
    return cmd


def start_server(args, port: int) -> subprocess.Popen:
    return subprocess.Popen(server_command(args, port))


def llamacpp_command(args, path: str, port: int, n_ctx: int) -> list[str]:
    """llama-cpp-python's OpenAI server on 127.0.0.1 for the GGUF file at path, the same threads."""
    threads = str(getattr(args, "threads", None) or common.torch_threads())
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", path]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--n_threads", threads, "--n_threads_batch", threads]
    cmd += ["--n_ctx", str(n_ctx), "--n_batch", str(args.max_batched_tokens), "--verbose", "False"]
    # Its default ends the running stream whenever another request arrives: each request is served whole.
    return cmd + ["--interrupt_requests", "False"]


def start_llamacpp_server(args, port: int, n_ctx: int) -> subprocess.Popen:
    """llama-cpp-python's OpenAI server on 127.0.0.1, the same file and threads; its own logs kept quiet."""
    import importlib.util

    from ..errors import TinyLLMError

    server_modules = ("llama_cpp", "llama_cpp.server", "sse_starlette", "starlette_context", "pydantic_settings")
    if any(importlib.util.find_spec(name) is None for name in server_modules):
        raise TinyLLMError(
            "--llamacpp-server needs llama-cpp-python with its server: pip install 'llama-cpp-python[server]'"
        )
    path = common.model_path(getattr(args, "model", None))
    if not path.endswith(".gguf"):
        raise TinyLLMError(f"--llamacpp-server runs GGUF files, got model {path!r}")
    cmd = llamacpp_command(args, path, port, n_ctx)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float, path: str = "/health") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}{path}", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the server at {url} was not healthy within {timeout} s")


# ---- the clients


async def _one(client, work, t0: float, body_of) -> dict:
    body = body_of(work)
    times, pieces, usage = [], [], None
    async with client.stream("POST", "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            if chunk["choices"] and chunk["choices"][0]["text"]:
                times.append(time.perf_counter())
                pieces.append(chunk["choices"][0]["text"])
    return {
        "span": (times[0], times[-1]) if times else None,
        "ttft": times[0] - t0 if times else None,
        "itl": [b - a for a, b in zip(times, times[1:])],
        "text": "".join(pieces),
        "tokens": usage["completion_tokens"] if usage else len(times),  # no usage: a chunk a token
    }


def our_body(work) -> dict:
    return {
        "prompt": work.ids,
        "max_tokens": work.max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def llamacpp_body(tokenizer, eos_ids):
    """llama.cpp's server takes text prompts and no ignore_eos: the workload's text, its EOS ids banned."""

    def body(work) -> dict:
        return {
            "prompt": tokenizer.decode(work.ids),
            "max_tokens": work.max_tokens,
            "temperature": 0,
            "stream": True,
            "logit_bias": {str(i): -100 for i in eos_ids},
        }

    return body


async def _drive_http(url: str, work: list, body_of=our_body) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=len(work) + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(_one(client, w, t0, body_of) for w in work))
        wall = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in results)
    return {
        "requests": len(work),
        "wall_s": wall,
        "output_tokens": tokens,
        "output_tokens_per_s": common.per_second(tokens, wall),
        "ttft_s": common.summary([r["ttft"] for r in results if r["ttft"] is not None]),
        "itl_s": common.summary([x for r in results for x in r["itl"]]),
        "peak_streaming": peak_overlap([r["span"] for r in results if r["span"]]),
        "texts": [r["text"] for r in results],
    }


def peak_overlap(spans: list[tuple[float, float]]) -> int:
    """The most streams between their first and last token (both included) at one moment."""
    events = sorted([(a, 0, 1) for a, _ in spans] + [(b, 1, -1) for _, b in spans])
    most = now = 0
    for _, _, step in events:
        now += step
        most = max(most, now)
    return most


def measure(llm, args, work: list) -> tuple[list[dict], list[dict], list[dict]]:
    """Each concurrency through the server, then through an in-process Engine of the same settings (then
    through llama.cpp's server with --llamacpp-server); the levels alternate so that every side sees the same
    machine load, and each side keeps one engine across levels so that all have the same prefix-cache
    history."""
    from ..server.transport.server_thread import free_port

    port = args.port or free_port()
    url = f"http://127.0.0.1:{port}"
    procs = [start_server(args, port)]
    peer_url, peer_body = None, None
    try:
        if getattr(args, "llamacpp_server", False):
            peer_port = free_port()
            peer_url = f"http://127.0.0.1:{peer_port}"
            n_ctx = max(2048, 2 * (args.prompt_range[1] + args.output_range[1]))
            procs.append(start_llamacpp_server(args, peer_port, n_ctx))
            peer_body = llamacpp_body(llm.tokenizer, llm.eos_ids)
            wait_healthy(peer_url, procs[-1], args.startup_timeout, path="/v1/models")
        wait_healthy(url, procs[0], args.startup_timeout)
        engine = llm.engine(
            max_num_seqs=max_num_seqs(args),
            max_num_batched_tokens=args.max_batched_tokens,
            kv_memory_bytes=args.kv_memory_mb << 20,
        )
        asyncio.run(_drive_http(url, work[:1]))  # first-call set-up, on every side
        drive_engine(engine, work[:1])
        if peer_url:
            asyncio.run(_drive_http(peer_url, work[:1], peer_body))
        http, local, peer = [], [], []
        for n in args.concurrency:
            http.append({"concurrency": n, **asyncio.run(_drive_http(url, work[:n]))})
            _progress("http", http[-1])
            result = drive_engine(engine, work[:n], keep_ids=True)
            result["texts"] = [llm.tokenizer.decode(ids) for ids in result.pop("ids")]
            local.append({"concurrency": n, **result})
            _progress("engine", local[-1])
            if peer_url:
                peer.append({"concurrency": n, **asyncio.run(_drive_http(peer_url, work[:n], peer_body))})
                peer[-1].pop("texts")
                _progress("llama.cpp server", peer[-1])
                if peer[-1]["output_tokens"] != http[-1]["output_tokens"]:
                    print(
                        f"  llama.cpp's server returned {peer[-1]['output_tokens']} tokens where ours returned "
                        f"{http[-1]['output_tokens']}: its figures are not of the same work",
                        flush=True,
                    )
        return http, local, peer
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _progress(what: str, r: dict) -> None:
    print(
        f"  {what} N={r['concurrency']}: {r['output_tokens_per_s']:.1f} output tok/s, "
        f"ttft p50 {r['ttft_s']['p50']:.3f} s, itl p50 {r['itl_s']['p50']:.4f} s p99 {r['itl_s']['p99']:.4f} s, "
        f"at most {r.get('peak_streaming', r.get('peak_running'))} streaming at once",
        flush=True,
    )


def compare(http: list[dict], engine: list[dict], peer: list[dict]) -> list[dict]:
    rows = []
    for i, (h, e) in enumerate(zip(http, engine)):
        same = sum(a == b for a, b in zip(h.pop("texts"), e.pop("texts")))
        row = {
            "concurrency": h["concurrency"],
            "texts_identical": f"{same}/{h['requests']}",
            "http_streams_at_once": h["peak_streaming"],
            "engine_over_http_tokens_per_s": common.ratio(e["output_tokens_per_s"], h["output_tokens_per_s"]),
            "http_over_engine_ttft_p50": common.ratio(h["ttft_s"]["p50"], e["ttft_s"]["p50"]),
            "http_over_engine_itl_p50": common.ratio(h["itl_s"]["p50"], e["itl_s"]["p50"]),
        }
        if peer:  # ours over llama.cpp's server: tokens/s (higher is better), latencies theirs over ours
            p = peer[i]
            row["llamacpp_streams_at_once"] = p["peak_streaming"]
            row["llamacpp_output_tokens"] = f"{p['output_tokens']}/{h['output_tokens']}"
            row["http_over_llamacpp_tokens_per_s"] = common.ratio(h["output_tokens_per_s"], p["output_tokens_per_s"])
            for key in ("ttft_s", "itl_s"):
                for q in ("p50", "p99"):
                    row[f"llamacpp_over_http_{key[:-2]}_{q}"] = common.ratio(p[key][q], h[key][q])
        rows.append(row)
    return rows


def draw(result: dict):
    def plot(fig):
        rate_ax, lat_ax = fig.subplots(1, 2)
        for side, style in (("http", "o"), ("engine", "s"), ("llamacpp_server", "^")):
            if not result.get(side):
                continue
            xs = [r["concurrency"] for r in result[side]]
            rate_ax.plot(xs, [r["output_tokens_per_s"] for r in result[side]], marker=style, label=side)
            for key in ("ttft_s", "itl_s"):
                lat_ax.plot(xs, [r[key]["p50"] for r in result[side]], marker=style, label=f"{side} {key[:-2]} p50")
        rate_ax.set(xlabel="concurrent clients", ylabel="output tokens/s", title="aggregate throughput", xscale="log")
        lat_ax.set(xlabel="concurrent clients", ylabel="seconds", title="latency", xscale="log", yscale="log")
        for ax in (rate_ax, lat_ax):
            ax.set_xticks(result["options"]["concurrency"], [str(n) for n in result["options"]["concurrency"]])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)

    return plot


def run_serve_bench(args) -> dict:
    """Measure the live server and the in-process engine on one workload; write serve.json (and .png)."""
    from ..llm import LLM

    path = common.model_path(getattr(args, "model", None))
    llm = LLM(path)
    work = make_workload(
        llm.tokenizer, max(args.concurrency), args.prompt_range, args.output_range, getattr(args, "seed", 0)
    )
    options = {k: v for k, v in vars(args).items() if k not in ("func", "bench_run")}
    result = {"bench": "serve", "model": path, "machine": common.machine_info(), "options": options}
    result["http"], result["engine"], result["llamacpp_server"] = measure(llm, args, work)
    result["comparison"] = compare(result["http"], result["engine"], result["llamacpp_server"])
    return common.save(getattr(args, "out", "bench-results"), "serve", result, draw(result), report)


def report(result: dict) -> str:
    return "\n".join(
        "  " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())
        for row in result["comparison"]
    )


run = run_serve_bench  # the interface `tinyllm bench` expects of a kind
