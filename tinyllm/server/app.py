"""create_app: the OpenAI-compatible HTTP API over one model.

/v1/* (each also without the /v1 prefix, as vLLM and llama.cpp answer), /tokenize, /detokenize, /tokenizer_info,
/openapi.json and /docs need the API key when one is set; /health and /metrics stay open for probes and scrapers
(and show no file-system paths). CORS is off unless origins are allowed, a Host header outside `allowed_hosts`
is refused (hosts.py), and no redirect is ever built from the Host header (no trailing-slash redirects). The model
loads in a background thread once the server is up, so /health can say 503 (loading) and then 200.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response

from .. import __version__
from ..engine.embedding_queue import EmbeddingLimits
from .endpoints.chat import chat_completion
from .endpoints.completions import completion
from .endpoints.embeddings import Embedder
from .endpoints.responses import create_response
from .endpoints.tokenization import add_tokenizer_routes
from .leases import ModelLeases, leases_of
from .metrics import CONTENT_TYPE, ServerMetrics
from .model_slots import ModelSource, SlotLimits
from .state import Ready, ServerState
from .surfaces import add_local_routes
from .transport.body import (
    add_body_schemas,
    chat_counts,
    completion_counts,
    parse_body,
    peek_json,
    request_body_doc,
    responses_counts,
)
from .transport.body_limit import BodyLimit
from .transport.hosts import HostAllowList
from .transport.origins import OriginGuard
from .transport.slow_clients import ConnectionLimits
from .wire.errors import APIError, install_error_handlers
from .wire.limits import MAX_BODY_BYTES
from .wire.protocol import (
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    DetokenizeRequest,
    ModelCard,
    ModelList,
    ResponsesRequest,
    TokenizeRequest,
)


def _auth_dependency(api_key: str | None):
    async def check(request: Request) -> None:
        if api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        # compare_digest: the time taken must not tell how much of a guessed key was right.
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), api_key.encode()):
            raise APIError(
                401, "invalid or missing API key; send the header 'Authorization: Bearer <key>'", code="invalid_api_key"
            )

    return check


def create_app(
    llm_or_loader=None,
    *,
    models: Sequence[ModelSource] | None = None,
    slot_limits: SlotLimits | None = None,
    served_model_name: str | None = None,
    api_key: str | None = None,
    allowed_origins: list[str] | None = None,
    allowed_hosts: Sequence[str] | None = None,
    limits: ConnectionLimits | None = None,
    embedding_limits: EmbeddingLimits | None = None,
    **engine_options,
) -> FastAPI:
    """An app serving `llm_or_loader` (an LLM, or a callable returning one, called in a background thread at
    startup), or the `models` named in their ModelSources (model_slots.py: loaded on first use or at start-up,
    unloaded after their keep_alive or for room within `slot_limits`). engine_options go to each model's Engine
    (max_num_seqs, kv_memory_bytes, ...); `allowed_origins` turns CORS on for those browser origins ("*" for
    any); `allowed_hosts` are the Host header values answered (hosts.py; None: any); `embedding_limits` bound
    what embeddings may cost and queue (per model)."""
    limits = limits or ConnectionLimits()
    metrics = ServerMetrics()
    sources = list(models or ()) or [_only_source(llm_or_loader, served_model_name)]
    state = ServerState(sources, engine_options, metrics, lambda: Embedder(embedding_limits), slot_limits)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        state.start_loading()
        try:
            yield
        finally:
            state.shutdown()  # queued embeddings answer 503, then the engines stop

    app = FastAPI(
        title="tinyllm",
        version=__version__,
        lifespan=lifespan,
        redirect_slashes=False,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,  # added below, behind the key
        description="An OpenAI-compatible API over one model. Each response carries the `seed` it "
        "sampled with (a fresh random one when the request sent none): sending it back "
        "reproduces the answer; choice i of n samples with seed + i.",
    )
    app.state.server = state
    app.add_middleware(ModelLeases, state=state)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES, body_timeout_s=limits.body_timeout_s)
    if allowed_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(allowed_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type"],
        )
    app.add_middleware(OriginGuard, allowed=tuple(allowed_origins or ()))  # a page elsewhere gets 403
    if allowed_hosts is not None:  # added last: the outermost check
        app.add_middleware(HostAllowList, allowed=tuple(allowed_hosts))
    install_error_handlers(app)
    auth = [Depends(_auth_dependency(api_key))]
    _add_docs_routes(app, auth)

    async def ready(request: Request) -> Ready:
        """The model the request names (its body's `model`), loaded first if it is not, held until the
        response ends (leases.py)."""
        return await state.acquire(await requested_model(request), leases_of(request.scope))

    _add_generation_routes(app, auth, ready)
    _add_model_routes(app, auth, state)
    add_tokenizer_routes(app, auth, ready)
    add_local_routes(app, auth, ready, state)  # surfaces.py: beside OpenAI's API
    _add_ops_routes(app, state, metrics)
    add_body_schemas(
        app, [ChatCompletionRequest, CompletionRequest, ResponsesRequest, TokenizeRequest, DetokenizeRequest]
    )
    return app


def _add_docs_routes(app: FastAPI, auth: list) -> None:
    @app.get("/openapi.json", dependencies=auth, include_in_schema=False)
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", dependencies=auth, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="tinyllm")


def _both(route, path: str, **options):
    """A decorator registering the handler at /v1{path} and, undocumented, at {path}."""

    def register(handler):
        route(f"/v1{path}", **options)(handler)
        return route(path, **{**options, "include_in_schema": False})(handler)

    return register


def _add_generation_routes(app: FastAPI, auth: list, ready) -> None:
    # Bodies are parsed off the event loop, counts checked before validation (body.py).
    @_both(
        app.post,
        "/chat/completions",
        dependencies=auth,
        response_model=ChatCompletionResponse,
        openapi_extra=request_body_doc(ChatCompletionRequest),
        responses={200: {"content": {"text/event-stream": {"schema": ChatCompletionChunk.model_json_schema()}}}},
    )
    async def chat(request: Request, ctx: Ready = Depends(ready)) -> Response:
        """Chat completion. Without max_tokens a choice may run to the end of the context."""
        body = await parse_body(request, ChatCompletionRequest, chat_counts(ctx.limits))
        return await chat_completion(body, request, ctx)

    @_both(
        app.post,
        "/completions",
        dependencies=auth,
        response_model=CompletionResponse,
        openapi_extra=request_body_doc(CompletionRequest),
    )
    async def complete(request: Request, ctx: Ready = Depends(ready)) -> Response:
        """Text completion of a prompt (text, ids, or a list of either)."""
        body = await parse_body(request, CompletionRequest, completion_counts(ctx.limits))
        return await completion(body, request, ctx)

    @_both(app.post, "/responses", dependencies=auth, openapi_extra=request_body_doc(ResponsesRequest))
    async def respond(request: Request, ctx: Ready = Depends(ready)) -> Response:
        """A minimal Responses API: text or message input, instructions, max_output_tokens, temperature,
        top_p and stream; other fields that would change the answer are a 400."""
        body = await parse_body(request, ResponsesRequest, responses_counts(ctx.limits))
        return await create_response(body, request, ctx)


def _only_source(llm_or_loader, served_model_name: str | None) -> ModelSource:
    """The one model of a server made from an LLM or a loader, named after its file unless named here."""
    if llm_or_loader is None:
        raise TypeError("create_app needs an LLM, a loader or models")
    aliases = None if served_model_name is None else frozenset()
    if callable(llm_or_loader):
        return ModelSource(served_model_name, load=llm_or_loader, aliases=aliases, preload=True)
    return ModelSource(served_model_name, llm=llm_or_loader, aliases=aliases, preload=True)


async def requested_model(request: Request) -> str | None:
    """The `model` a POST body names (Ollama's /api/show may say `name`), read before the route parses it."""
    if request.method != "POST":
        return None
    data = await peek_json(request)
    if not isinstance(data, dict):
        return None  # the route's parse answers 400
    model = data.get("model") or data.get("name")
    return model if isinstance(model, str) and model else None


def _add_model_routes(app: FastAPI, auth: list, state: ServerState) -> None:
    def card(slot) -> ModelCard:
        if slot.seen_name is None and not state.many:
            state.require(slot)  # never loaded yet: 503 while it loads, or why it failed
        return ModelCard(id=slot.name, max_model_len=slot.context_length)

    @_both(app.get, "/models", dependencies=auth, response_model=ModelList)
    async def models() -> ModelList:
        """Every model served here, loaded or not (max_model_len once it is loaded)."""
        return ModelList(data=[card(slot) for slot in state.slots])

    @_both(app.get, "/models/{model_id:path}", dependencies=auth, response_model=ModelCard)
    async def model(model_id: str) -> ModelCard:
        """A served model by its name or an alias (its file name); any other name is a 404."""
        slot = state.slot_for(model_id)
        if not state.many:
            card(slot)
            slot.check_name(model_id)
        return card(slot)


def first_line(text: str | None) -> str | None:
    return None if text is None else text.split("\n", 1)[0]


def _add_ops_routes(app: FastAPI, state: ServerState, metrics: ServerMetrics) -> None:
    @app.get("/health")
    async def health() -> JSONResponse:
        """503 while the default model first loads (or if it failed to), while the server shuts down, or when an
        engine stopped; 200 with the default engine's state (once loaded) and the models loaded."""
        if state.draining:  # a balancer stops sending here; running requests go on (transport/drain.py)
            return JSONResponse({"status": "shutting_down", "error": None}, status_code=503)
        slot = state.default
        if slot.status == "failed" or (slot.status == "loading" and slot.seen_name is None):
            return JSONResponse({"status": slot.status, "error": slot.error_kind}, status_code=503)
        loaded = [s.ready for s in state.slots if s.ready is not None]
        stopped = [r for r in loaded if not r.engine.alive]
        if stopped:
            # Only the first line of why the engine stopped (which tensor-parallel rank, how): the rest (a rank's
            # last output) may name files; the server log has the whole of it.
            return JSONResponse(
                {"status": "engine_stopped", "error": first_line(stopped[0].engine.error)}, status_code=503
            )
        answer = {"status": "ok", "model": slot.name, "loaded": [r.model_name for r in loaded]}
        if slot.ready is not None:
            s = slot.ready.engine.state
            kv = {"total": s.blocks_total, "used": s.blocks_used, "cached": s.blocks_cached}
            answer.update(running=s.running, waiting=s.waiting, kv_blocks=kv)
        return JSONResponse(answer)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)
