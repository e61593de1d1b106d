"""`tinyllm serve`: the OpenAI-compatible server. Only argparse is imported here, so building the
`tinyllm` command stays fast; fastapi, uvicorn and the model load when `serve` runs."""

from __future__ import annotations

import argparse
import os

from ..cli_flags import (
    PORT,
    POSITIVE,
    FloatRange,
    add_kv_dtype_arg,
    add_model_args,
    add_speculative_args,
    add_threads_arg,
)
from ..distributed.cli_args import add_parallel_args, parallel_from_args
from ..errors import TinyLLMError

API_KEY_ENV = "TINYLLM_API_KEY"
SHUTDOWN_TIMEOUT_S = 30.0


def add_serve_command(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="an OpenAI-compatible HTTP server (chat, completions, metrics)",
        description="Serve one model over an OpenAI-compatible HTTP API. The port "
        "answers at once; /health says 503 until the model has loaded.",
    )
    add_model_args(p)
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 exposes it)"
    )
    p.add_argument("--port", type=PORT, default=8000, help="port to listen on (default 8000)")
    p.add_argument(
        "--api-key",
        default=None,
        help=f"require 'Authorization: Bearer KEY' on /v1/* (default: ${API_KEY_ENV} if set, else none)",
    )
    p.add_argument(
        "--served-model-name",
        default=None,
        help="the model id clients send (default: the file name, with or without .gguf)",
    )
    p.add_argument(
        "--allowed-origins",
        nargs="+",
        default=None,
        help="browser origins allowed by CORS, e.g. http://localhost:3000 or * (default: CORS off)",
    )
    p.add_argument(
        "--allowed-hosts",
        default=None,
        help="Host header values answered, comma-separated: a name or address (any port), name:port, [v6 address], "
        "or * for any; other hosts get 400, against DNS rebinding (default: localhost, 127.0.0.1 and [::1] when "
        "--host is a loopback address, any host otherwise)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        help="seconds a connection may take to send its request headers (default 10)",
    )
    p.add_argument(
        "--body-timeout", type=float, default=30.0, help="seconds a request body may pause between parts (default 30)"
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=256,
        help="open connections (and running requests) before new ones get 503 (default 256)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=FloatRange(lambda v: v > 0, "a positive number of seconds"),
        default=SHUTDOWN_TIMEOUT_S,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl-C, seconds running requests get to finish before they are ended with a final "
        f"event saying the server is shutting down; new requests get 503 meanwhile (default {SHUTDOWN_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--max-num-seqs",
        type=POSITIVE,
        default=32,
        help="sequences batched together (default 32; 1 serves one request at a time)",
    )
    p.add_argument("--max-num-batched-tokens", type=POSITIVE, default=256, help="tokens per engine step (default 256)")
    p.add_argument("--kv-memory-gb", type=float, default=1.0, help="KV cache pool size in GiB (default 1)")
    p.add_argument("--block-size", type=POSITIVE, default=16, help="tokens per KV block (default 16)")
    add_embedding_args(p)
    add_kv_dtype_arg(p)
    add_threads_arg(p)
    add_speculative_args(p)
    add_parallel_args(p)
    p.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's log level (default info)",
    )
    p.set_defaults(func=cmd_serve)


EMBEDDING_FLAGS = {  # flag -> EmbeddingLimits field, default (engine/embedding_queue.py's, without torch here)
    "--embedding-max-tokens": ("max_request_tokens", 8192, "tokens of one embedding request's inputs together"),
    "--embedding-queue-requests": ("max_queued_requests", 64, "embedding requests waiting before new ones get 429"),
    "--embedding-queue-tokens": ("max_queued_tokens", 65536, "tokens waiting to be embedded before new ones get 429"),
    "--embedding-batch-tokens": ("batch_tokens", 64, "tokens per embedding forward (a longer input runs in chunks)"),
}


def add_embedding_args(p) -> None:
    for flag, (field, default, what) in EMBEDDING_FLAGS.items():
        p.add_argument(
            flag, dest=f"embedding_{field}", type=POSITIVE, default=default, help=f"{what} (default {default})"
        )


def embedding_limits(args):
    from ..engine.embedding_queue import EmbeddingLimits

    try:
        return EmbeddingLimits(
            **{field: getattr(args, f"embedding_{field}") for field, _, _ in EMBEDDING_FLAGS.values()}
        )
    except ValueError as exc:
        flags = {field: flag for flag, (field, _, _) in EMBEDDING_FLAGS.items()}
        raise TinyLLMError(" ".join(flags.get(word, word) for word in str(exc).split(" "))) from None


def engine_options(args) -> dict:
    if not args.kv_memory_gb > 0:
        raise TinyLLMError(f"--kv-memory-gb must be > 0, got {args.kv_memory_gb}")
    options = dict(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        kv_memory_bytes=int(args.kv_memory_gb * (1 << 30)),
        kv_dtype=args.kv_dtype,
        # the KV pool is written at start-up, as llama.cpp allocates its cache at load: no stream stalls later
        # while the first sequences fault its fresh pages in (docs/server.md, "Start-up and shutdown")
        resident_kv=True,
    )
    if args.speculative is not None:
        from ..speculative.proposer import SpeculativeConfig

        options["speculative"] = SpeculativeConfig(
            method=args.speculative,
            num_draft_tokens=args.num_draft_tokens,
            draft_model=args.draft_model,
            draft_layers=args.draft_layers,
        )
    elif args.draft_model is not None or args.draft_layers is not None:
        raise TinyLLMError("--draft-model and --draft-layers need --speculative draft")
    from ..engine.engine import EngineConfig

    EngineConfig(**options)  # a bad option fails now, not later in the loading thread
    return options


def connection_limits(args):
    from .transport.slow_clients import ConnectionLimits

    try:
        return ConnectionLimits(
            header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout, max_connections=args.max_connections
        )
    except ValueError as exc:
        name, _, rest = str(exc).partition(" ")
        flag = {
            "header_timeout_s": "--header-timeout",
            "body_timeout_s": "--body-timeout",
            "max_connections": "--max-connections",
        }.get(name, name)
        raise TinyLLMError(f"{flag} {rest}") from None


def allowed_hosts(args) -> tuple[str, ...] | None:
    from .transport.hosts import default_allowed_hosts, parse_allowed_hosts

    if args.allowed_hosts is None:
        return default_allowed_hosts(args.host)
    try:
        return parse_allowed_hosts(args.allowed_hosts)
    except ValueError as exc:
        raise TinyLLMError(str(exc)) from None


def cmd_serve(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise TinyLLMError(f"--port must be in 1..65535, got {args.port}")
    options = engine_options(args)
    limits = connection_limits(args)
    parallel = parallel_from_args(args)  # checked before the port opens
    try:
        import uvicorn

        from .app import create_app
    except ImportError as exc:
        raise TinyLLMError(
            f"tinyllm serve needs fastapi, uvicorn and prometheus-client ({exc}); "
            f"install them with: pip install fastapi uvicorn prometheus-client"
        ) from None

    def load():
        import torch

        from ..llm import LLM

        if args.threads:
            torch.set_num_threads(args.threads)

        return LLM(
            args.model,
            dtype=args.dtype,
            device=args.device,
            weights=args.weights,
            quantize=args.quantize,
            parallel=parallel,
        )

    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    app = create_app(
        load,
        served_model_name=args.served_model_name,
        api_key=api_key,
        allowed_origins=args.allowed_origins,
        allowed_hosts=allowed_hosts(args),
        limits=limits,
        embedding_limits=embedding_limits(args),
        **options,
    )
    from .transport.drain import DrainingServer
    from .transport.slow_clients import uvicorn_options
    from .wire.client_text import log_config

    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        log_config=log_config(args.log_level),  # what a client controls is clipped in log lines
        timeout_graceful_shutdown=5,  # after the drain: for the last events to go out
        **uvicorn_options(limits),
    )
    server = DrainingServer(config, app.state.server, args.shutdown_timeout)  # SIGTERM drains (drain.py)
    server.run()
    return 0 if server.started else 3  # not started: uvicorn logged why (e.g. the port is taken)
