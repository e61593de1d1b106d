"""`tinyllm serve`: the OpenAI-compatible server. Only argparse is imported here, so building the
`tinyllm` command stays fast; fastapi, uvicorn and the model load when `serve` runs."""

from __future__ import annotations

import argparse
import os

from ..cli_flags import (
    PORT,
    POSITIVE,
    FloatRange,
    add_ctx_size_arg,
    add_kv_dtype_arg,
    add_model_args,
    add_speculative_args,
    add_threads_arg,
)
from ..distributed.cli_args import add_parallel_args, parallel_from_args
from ..errors import TinyLLMError

API_KEY_ENV = "TINYLLM_API_KEY"
SHUTDOWN_TIMEOUT_S = 30.0
KEEP_ALIVE_DEFAULT = "5m"  # Ollama's
MAX_LOADED_DEFAULT = 3  # Ollama's, on a machine without a GPU


def add_serve_command(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="an OpenAI- and Ollama-compatible HTTP server (chat, completions, embeddings, metrics)",
        description="Serve --model, or without it every model this machine has (the default model and those in "
        "the models folder: tinyllm list), over OpenAI's and Ollama's HTTP APIs; a request names its model. The "
        "port answers at once; /health says 503 until the first model has loaded. Other models load on first "
        "use and unload after --keep-alive idle, or for room (--max-loaded-models, --max-memory-gb).",
    )
    add_model_args(p)
    add_ctx_size_arg(p)
    add_model_slot_args(p)
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
    p.add_argument(
        "--kv-memory-gb",
        type=float,
        default=None,
        help="KV cache pool size in GiB, per model (default 1, or with --ctx-size what that many tokens take)",
    )
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


def add_model_slot_args(p) -> None:
    g = p.add_argument_group("models loaded at once")
    g.add_argument(
        "--keep-alive",
        default=None,
        metavar="DURATION",
        help='how long a model stays loaded with no request: seconds or a duration ("5m", "1h"), negative to '
        "keep it; a request's own keep_alive (Ollama's) overrides it (default: the first model stays, "
        f"others {KEEP_ALIVE_DEFAULT})",
    )
    g.add_argument(
        "--max-loaded-models",
        type=POSITIVE,
        default=MAX_LOADED_DEFAULT,
        metavar="N",
        help="models loaded at once; the least recently used idle one unloads for another "
        f"(default {MAX_LOADED_DEFAULT})",
    )
    g.add_argument(
        "--max-memory-gb",
        type=FloatRange(lambda v: v > 0, "a positive number of GiB"),
        default=None,
        metavar="GIB",
        help="memory the loaded models may hold together (each: its file's size + its KV pool); the least recently "
        "used idle one unloads for another (default: 3/4 of this machine's memory)",
    )


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
    if args.kv_memory_gb is not None and not args.kv_memory_gb > 0:
        raise TinyLLMError(f"--kv-memory-gb must be > 0, got {args.kv_memory_gb}")
    options = dict(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        kv_dtype=args.kv_dtype,
        # the KV pool is written at start-up, as llama.cpp allocates its cache at load: no stream stalls later
        # while the first sequences fault its fresh pages in (docs/server.md, "Start-up and shutdown")
        resident_kv=True,
    )
    if getattr(args, "ctx_size", None) is not None and args.kv_memory_gb is None:
        options["num_blocks"] = -(-args.ctx_size // args.block_size)  # the pool holds --ctx-size tokens, as llama.cpp's
    else:
        options["kv_memory_bytes"] = int((args.kv_memory_gb or 1.0) * (1 << 30))
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


def loader(args, path: str | None, parallel):
    """A function that loads `path` (None: --model) as the flags say, in the server's loading thread."""

    def load():
        import torch

        from ..llm import LLM

        if args.threads:
            torch.set_num_threads(args.threads)
        options = dict(dtype=args.dtype, device=args.device, weights=args.weights, quantize=args.quantize)
        return LLM(args.model if path is None else path, parallel=parallel, ctx_size=args.ctx_size, **options)

    return load


def keep_alive_flag(args) -> tuple[float | None, float | None]:
    """(the first model's keep_alive, the others'), in seconds; None: stays loaded."""
    from .ollama.keep_alive import keep_alive_seconds
    from .wire.errors import APIError

    try:
        if args.keep_alive is None:
            return None, keep_alive_seconds(KEEP_ALIVE_DEFAULT)
        seconds = keep_alive_seconds(args.keep_alive)
    except APIError:
        raise TinyLLMError(
            f'--keep-alive must be seconds or a duration such as "5m" or "1h", got {args.keep_alive!r}'
        ) from None
    return seconds, seconds


def model_sources(args, parallel) -> list:
    """--model alone (named after its file, or --served-model-name; the default model when only that is given),
    or every model this machine has, the default model first and loaded at start-up, the others on first use."""
    from ..loading.file_summary import summary_of
    from ..loading.model_store import stored_models
    from .model_slots import ModelSource

    first_keep, others_keep = keep_alive_flag(args)
    if args.model is not None or args.served_model_name is not None:  # one model: --model, or the default renamed
        aliases = None if args.served_model_name is None else frozenset()
        load = loader(args, None, parallel)
        return [ModelSource(args.served_model_name, load=load, aliases=aliases, keep_alive_s=first_keep, preload=True)]
    found = stored_models()
    if not found:
        raise TinyLLMError(
            "no model to serve: the default model is not installed and the models folder is empty; "
            "give --model, or see tinyllm pull"
        )
    return [
        ModelSource(
            m.name,
            load=loader(args, m.path, parallel),
            aliases=m.aliases,
            path=m.path,
            keep_alive_s=first_keep if i == 0 else others_keep,
            preload=i == 0,
            context_length=summary_of(m.path)["context_length"],
        )
        for i, m in enumerate(found)
    ]


def slot_limits(args):
    from .model_slots import SlotLimits

    if args.max_memory_gb is not None:
        budget = int(args.max_memory_gb * (1 << 30))
    else:
        budget = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4
    return SlotLimits(max_loaded=args.max_loaded_models, memory_budget=budget)


def cmd_serve(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise TinyLLMError(f"--port must be in 1..65535, got {args.port}")
    if args.model is not None:
        from ..cli_checks import check_model_path

        check_model_path(args.model)  # a misspelt name fails before the port opens
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

    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    app = create_app(
        models=model_sources(args, parallel),
        slot_limits=slot_limits(args),
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
