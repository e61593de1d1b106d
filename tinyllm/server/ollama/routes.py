"""Ollama's routes on the server's app, behind the same API key, answering errors in Ollama's shape:
{"error": "<message>"} with the HTTP status the OpenAI routes would give.

Chat and generate become the OpenAI requests they amount to (requests.py) and go through the same preparation
as /v1/chat/completions and /v1/completions; embeddings go through the same Embedder as /v1/embeddings.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import torch
from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute, APIRouter
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from ...loading.digest import model_digest
from ...loading.file_summary import summary_of
from ...loading.model_card import model_license
from ...model.pooling import Pooling
from ...sampling.params import SamplingParams
from ..checks.admission import room_or_400
from ..checks.embeddings import input_counts, split_inputs
from ..checks.prompts import encode_text
from ..endpoints.chat import prepare_chat
from ..endpoints.completions import prepare_completion
from ..endpoints.serving import ClientGone, client_gone_response
from ..state import Ready
from ..transport.body import chat_counts, ids_counts, parse_body, peek_json
from ..wire.errors import APIError, bad_request, nesting_is_400, validation_error
from . import models
from .answer import Job, Shape, answer, load_answer, unload_answer
from .keep_alive import keep_alive_seconds
from .options import Sampling, sampling_of
from .protocol import ChatBody, EmbedBody, GenerateBody, LegacyEmbeddingsBody, ShowBody, nanos
from .requests import (
    chat_request,
    generate_messages,
    model_name,
    openai_message,
    raw_request,
    refuse_unsupported,
    renamed,
)

NOT_HERE = ("pull", "push", "create", "copy", "delete", "blobs")  # managing models: on the command line

log = logging.getLogger("tinyllm.server")


def error_response(exc: APIError) -> JSONResponse:
    return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers or None)


class OllamaRoute(APIRoute):
    """A route whose failures, its dependencies' (the key, the model loading) included, answer in Ollama's shape."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except Unloaded as done:
                return JSONResponse(unload_answer(done.model, done.is_chat))
            except APIError as exc:
                return error_response(renamed(exc))
            except RequestValidationError as exc:
                return error_response(validation_error(exc))
            except HTTPException as exc:
                return error_response(APIError(exc.status_code, str(exc.detail)))

        return run


def _openai(build):
    """An OpenAI request built from Ollama's fields; what fails validation is a 400 naming the field."""
    try:
        return build()
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise validation_error(RequestValidationError(errors)) from None


def _within(job: Job, num_ctx: int | None) -> Job:
    """The job held to the request's own context (options.num_ctx): prompt and answer together fit in it."""
    if num_ctx is None:
        return job
    room_or_400(len(job.ids), num_ctx, job.param, context_field="options.num_ctx")  # nothing is cut to fit
    ctx_left = num_ctx - len(job.ids)  # the context's positions after the prompt
    max_tokens = ctx_left if job.params.max_tokens is None else min(job.params.max_tokens, ctx_left)
    return replace(job, params=job.params.replace(max_tokens=max_tokens))


async def _chat_job(body: ChatBody, sampling: Sampling, ctx: Ready) -> Job:
    reasons = ctx.tokenizer.reasoning is not None
    messages = [openai_message(i, m, reasons) for i, m in enumerate(body.messages or [])]
    openai = _openai(lambda: chat_request(body, sampling, messages))
    with nesting_is_400():
        prompt, params, _, tools, thinking = await prepare_chat(openai, ctx)
    return Job(prompt.ids, params[0], tools, "messages", False, thinking.reasons)


async def _generate_job(body: GenerateBody, sampling: Sampling, ctx: Ready) -> Job:
    before = list(body.context or [])
    if body.raw:
        ctx.limits.check_text(len(body.prompt), "prompt")
        ids = before + await run_in_threadpool(encode_text, ctx.tokenizer, body.prompt)
        ctx.limits.check_ids(len(ids), "prompt")
        job = _within(Job(ids, SamplingParams(max_tokens=None), None, "prompt", True), sampling.num_ctx)
        ctx_left = (sampling.num_ctx or ctx.context_length) - len(job.ids)  # positions after the prompt
        max_tokens = sampling.fields.get("max_tokens") or ctx_left  # a raw prompt too may run to the context's end
        openai = _openai(lambda: raw_request(body, sampling, ids, max_tokens))
        with nesting_is_400():
            [ids], params, _ = await prepare_completion(openai, ctx)
        return Job(ids, params[0], None, "prompt", returns_context=True)
    openai = _openai(lambda: chat_request(body, sampling, generate_messages(body)))
    with nesting_is_400():
        prompt, params, _, _, thinking = await prepare_chat(openai, ctx)
    ids = before + prompt.ids  # a previous answer's conversation, then this turn
    ctx.limits.check_room(len(ids), params[0].max_tokens, "context" if before else "prompt", "options.num_predict")
    return Job(ids, params[0], None, "prompt", True, thinking.reasons)


def add_ollama_routes(app: FastAPI, auth: list, ready, state) -> None:
    """`ready`: the app's model dependency; `state`: its ServerState (the models to list and unload)."""
    router = APIRouter(route_class=OllamaRoute, dependencies=auth, include_in_schema=False)

    async def generating(request: Request) -> Ready:
        """The model, as `ready` gives it; but a request with nothing to generate and keep_alive 0 unloads it."""
        data = await peek_json(request)
        path = request.url.path
        if path in ("/api/chat", "/api/generate") and isinstance(data, dict) and _unloads(data, path == "/api/chat"):
            await state.unload(model_name(data.get("model")))
            raise Unloaded(model_name(data.get("model")) or state.default.name, path == "/api/chat")
        ctx = await ready(request)
        if isinstance(data, dict) and data.get("keep_alive") is not None:
            state.keep(ctx, keep_alive_seconds(data["keep_alive"]))
        return ctx

    @router.post("/api/chat")
    async def chat(request: Request, ctx: Ready = Depends(generating)) -> Response:
        arrival = time.perf_counter()
        body = await parse_body(request, ChatBody, chat_counts(ctx.limits))
        sampling = noted(request, sampling_of(body.options, ctx.context_length))
        refuse_unsupported(body, ctx.tokenizer.reasoning is not None)
        if not body.messages:
            ctx.check_model(model_name(body.model))
            return JSONResponse(load_answer(ctx.model_name, is_chat=True))
        job = _within(await _chat_job(body, sampling, ctx), sampling.num_ctx)
        shape = Shape(ctx.model_name, True, ctx.texts, bool(body.logprobs))
        return await answer(request, ctx, job, shape, body.stream is not False, arrival)

    @router.post("/api/generate")
    async def generate(request: Request, ctx: Ready = Depends(generating)) -> Response:
        arrival = time.perf_counter()
        body = await parse_body(request, GenerateBody, ids_counts(ctx.limits, "context"))
        sampling = noted(request, sampling_of(body.options, ctx.context_length))
        refuse_unsupported(body, ctx.tokenizer.reasoning is not None)
        if not body.prompt:
            ctx.check_model(model_name(body.model))
            return JSONResponse(load_answer(ctx.model_name, is_chat=False))
        job = _within(await _generate_job(body, sampling, ctx), sampling.num_ctx)
        shape = Shape(ctx.model_name, False, ctx.texts, bool(body.logprobs))
        return await answer(request, ctx, job, shape, body.stream is not False, arrival)

    _add_embedding_routes(router, generating, ready)
    _add_model_routes(router, ready, state)
    app.include_router(router)


def _add_embedding_routes(router: APIRouter, generating, ready) -> None:
    """`generating`: the model dependency that also reads keep_alive (the legacy route takes none)."""

    @router.post("/api/embed")
    async def embed(request: Request, ctx: Ready = Depends(generating)) -> Response:
        """Mean-pooled, L2-normalized final hidden states of each input."""
        arrival = time.perf_counter()
        body = await parse_body(request, EmbedBody, input_counts(ctx.limits, "input"))
        ctx.check_model(model_name(body.model))
        sampling = noted(request, sampling_of(body.options, ctx.context_length, generating=False))
        width = _embed_width(body.dimensions, ctx)
        if body.input is None:
            raise bad_request("input is missing; send a text or a list of texts", "input")
        items = split_inputs(body.input)
        cut = body.truncate is not False  # Ollama's default: an input longer than the context is cut to it
        try:
            context = sampling.num_ctx
            done = await ctx.embedder.embed(request, ctx, items, Pooling.MEAN, True, truncate=cut, context=context)
        except ClientGone:
            return client_gone_response()
        return JSONResponse(
            {
                "model": ctx.model_name,
                "embeddings": _shortened(done.vectors, width).tolist(),
                "total_duration": nanos(time.perf_counter() - arrival),
                "load_duration": 0,
                "prompt_eval_count": done.num_tokens,
            }
        )

    @router.post("/api/embeddings")
    async def legacy_embeddings(request: Request, ctx: Ready = Depends(ready)) -> Response:
        """Ollama's older route: one prompt's mean-pooled final hidden states, not normalized (as Ollama's)."""
        body = await parse_body(request, LegacyEmbeddingsBody)
        ctx.check_model(model_name(body.model))
        sampling = noted(request, sampling_of(body.options, ctx.context_length, generating=False))
        if not body.prompt:
            raise bad_request("prompt is missing or empty; send the text to embed", "prompt")
        try:
            done = await ctx.embedder.embed(
                request, ctx, [body.prompt], Pooling.MEAN, False, "prompt", context=sampling.num_ctx
            )
        except ClientGone:
            return client_gone_response()
        return JSONResponse({"embedding": done.vectors[0].tolist()})


class Unloaded(Exception):
    """Raised by a request that unloads its model: answered with Ollama's `done_reason: "unload"`."""

    def __init__(self, model: str, is_chat: bool):
        super().__init__(model)
        self.model, self.is_chat = model, is_chat


def _unloads(data: dict, is_chat: bool) -> bool:
    """keep_alive 0 (or "0s", ...) and nothing to generate: Ollama's way to unload a model."""
    if data.get("keep_alive") is None or data.get("messages" if is_chat else "prompt"):
        return False
    return keep_alive_seconds(data["keep_alive"]) == 0


def noted(request: Request, sampling: Sampling) -> Sampling:
    """The options as read, with what was ignored or changed in them in the server's log, as Ollama logs it."""
    if sampling.notes:
        log.warning("%s %s: %s", request.method, request.url.path, "; ".join(sampling.notes))
    return sampling


def _embed_width(dimensions: int | None, ctx: Ready) -> int | None:
    """`dimensions` as Ollama takes it: the first that many of each vector's values (None: all of them)."""
    width = ctx.parts.config.hidden_size
    if dimensions is None or dimensions == width:
        return None
    if isinstance(dimensions, bool) or not 1 <= dimensions < width:
        raise bad_request(
            f"dimensions must be between 1 and the model's {width} dimensions, got {dimensions!r}", "dimensions"
        )
    return dimensions


def _shortened(vectors: torch.Tensor, width: int | None) -> torch.Tensor:
    """Each normalized vector [N, C] cut to its first `width` values and normalized again (Ollama's truncation)."""
    if width is None:
        return vectors
    return torch.nn.functional.normalize(vectors[:, :width], dim=-1)  # [N, width]


def _add_model_routes(router: APIRouter, ready, state) -> None:
    async def listed(slot) -> models.Listed:
        """A slot as the listings show it: from its loaded model, or from its file's header."""
        ready_now = slot.ready if slot.ready is not None or state.many else state.require(slot)
        if ready_now is not None:
            path = ready_now.path
            info = await run_in_threadpool(ready_now.info)
        else:
            path = slot.source.path
            info = await run_in_threadpool(summary_of, path or "")
        return models.Listed(slot.name, path or None, info, await run_in_threadpool(model_digest, path or ""))

    @router.get("/api/tags")
    async def tags() -> dict:
        """Every model served here, loaded or not."""
        return {"models": [models.tag(await listed(slot)) for slot in state.slots if slot.status != "failed"]}

    @router.get("/api/ps")
    async def ps() -> dict:
        """The models loaded now, each with when it unloads if left idle."""
        now, shown = time.monotonic(), []
        for slot in [s for s in state.slots if s.ready is not None]:
            ready_now = slot.ready
            on_gpu = str(getattr(ready_now.parts.model, "device", "cpu")).startswith("cuda")
            left = None if slot.keep_alive_s is None else max(0.0, slot.keep_alive_s - slot.idle_s(now))
            shown.append(models.running(await listed(slot), ready_now.context_length, on_gpu, left))
        if not shown and not state.many and state.default.seen_name is None:
            state.require()  # a server of one model: 503 while it first loads, as before
        return {"models": shown}

    @router.post("/api/show")
    async def show(request: Request, ctx: Ready = Depends(ready)) -> dict:
        body = await parse_body(request, ShowBody)
        ctx.check_model(model_name(body.model or body.name))
        info = await run_in_threadpool(ctx.info)
        return models.show(ctx, info, await run_in_threadpool(model_license, ctx.path))

    _add_unmanaged_routes(router)


def _add_unmanaged_routes(router: APIRouter) -> None:
    """The version, and a 501 for each route that would manage models."""

    @router.get("/api/version")
    async def version() -> dict:
        return models.version()

    async def not_here(request: Request) -> Response:
        what = request.url.path.rsplit("/", 1)[-1]
        raise APIError(
            501,
            f"/api/{what} is not supported: models are managed on the server's machine with tinyllm pull, list "
            "and rm, and the server serves the models it found when it started",
        )

    for name in NOT_HERE:
        router.add_api_route(f"/api/{name}", not_here, methods=["POST", "DELETE", "HEAD"])
