"""POST /v1/embeddings, in OpenAI's shape: `input` as text, texts, token ids or lists of ids; `encoding_format`
"float" or "base64" (little-endian float32, as OpenAI's SDK asks by default); `dimensions` only as the model's
own width. Two extras: `pooling` ("mean", the default, or "last") and `normalize` (default true). Each vector is
the model's final hidden states after its final norm, pooled (model/pooling.py).

Limits, checked before the work (checks/embeddings.py): at most MAX_INPUTS inputs, each within the context, at most
`EmbeddingLimits.max_request_tokens` tokens together. Both APIs' embeddings go through one EmbeddingQueue
(engine/embedding_queue.py): its thread runs every forward, batching several requests' inputs; a waiting request
holds no thread, a full queue answers 429 with Retry-After, a client that leaves has its inputs dropped, and once
the server shuts down the queued requests answer 503.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from dataclasses import dataclass

import torch
from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from ...embedding import check_embeddable
from ...engine.embedding_queue import EmbeddingLimits, EmbeddingQueue, Job, QueueClosed, QueueFull
from ...errors import TinyLLMError
from ...model.pooling import Pooling
from ..checks.embeddings import (
    PROMPT_PARAM,
    check_dimensions,
    embedding_ids,
    input_counts,
    pooling_options,
    split_inputs,
)
from ..state import Ready
from ..transport.body import parse_body, request_body_doc
from ..wire.errors import APIError, bad_request
from ..wire.protocol import EmbeddingRequest
from .serving import ClientGone, client_gone_response, until_disconnected


@dataclass(frozen=True)
class Embedded:
    vectors: torch.Tensor  # float32 [N, C]
    num_tokens: int  # of every input together


def shutting_down() -> APIError:
    return APIError(503, "the server is shutting down", code="shutting_down")


class Embedder:
    """Embeds for one model on one EmbeddingQueue, started at its first request and closed with its engine."""

    def __init__(self, limits: EmbeddingLimits | None = None):
        self.limits = limits or EmbeddingLimits()
        self._lock = threading.Lock()
        self._queue: EmbeddingQueue | None = None
        self._is_closed = False

    @property
    def queue(self) -> EmbeddingQueue | None:
        return self._queue

    async def embed(
        self,
        request: Request,
        ctx: Ready,
        items: list,
        pooling: Pooling,
        normalize: bool,
        param: str = PROMPT_PARAM,
        *,
        truncate: bool = False,
        context: int | None = None,
    ) -> Embedded:
        """The vectors of `items`; raises ClientGone when the client disconnects first."""
        try:
            check_embeddable(ctx.parts)
        except TinyLLMError as exc:
            raise bad_request(f"this server cannot embed: {exc}") from None
        for i, item in enumerate(items):
            if isinstance(item, str):
                ctx.limits.check_text(len(item), f"{param}[{i}]")
        max_tokens = self.limits.max_request_tokens
        vocab, context = ctx.parts.config.vocab_size, context or ctx.context_length
        ids = await run_in_threadpool(embedding_ids, ctx.tokenizer, vocab, context, items, param, truncate, max_tokens)
        queue = self._started(ctx.parts.model)
        try:
            job = queue.submit(ids, pooling, normalize)
        except QueueFull as exc:
            headers = {"Retry-After": str(exc.retry_after_s)}
            raise APIError(429, str(exc), code="queue_full", type="rate_limit_error", headers=headers) from None
        except QueueClosed:
            raise shutting_down() from None
        vectors = await _answer(request, queue, job)
        return Embedded(vectors, sum(len(x) for x in ids))

    def _started(self, model) -> EmbeddingQueue:
        with self._lock:
            if self._is_closed:
                raise shutting_down()
            if self._queue is None:
                self._queue = EmbeddingQueue(model, self.limits).start()
            return self._queue

    def close(self) -> None:
        """Refuse new requests (503), let the running batch finish, answer the queued ones 503, join the thread."""
        with self._lock:
            self._is_closed = True
            queue = self._queue
        if queue is not None:
            queue.close()


async def _answer(request: Request, queue: EmbeddingQueue, job: Job) -> torch.Tensor:
    """The job's vectors [N, C]; if the client disconnects first, its inputs are dropped and ClientGone raised."""
    watch = asyncio.ensure_future(until_disconnected(request))
    try:
        await asyncio.wait({job.future, watch}, return_when=asyncio.FIRST_COMPLETED)
        if not job.future.done():
            raise ClientGone()
        try:
            return job.future.result()
        except QueueClosed:
            raise shutting_down() from None
        except RuntimeError as exc:  # the forward failed (logged by the queue)
            raise APIError(500, str(exc)) from None
    finally:
        watch.cancel()
        queue.cancel(job)  # nothing left to drop once it is answered


def _encoded(vector: torch.Tensor, encoding_format: str | None) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.numpy().astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def add_embedding_routes(app: FastAPI, auth: list, ready) -> None:
    async def embeddings(request: Request, ctx: Ready = Depends(ready)) -> Response:
        """Pooled final hidden states of each input (see the `pooling` and `normalize` extras)."""
        body = await parse_body(request, EmbeddingRequest, input_counts(ctx.limits))
        ctx.check_model(body.model)
        check_dimensions(body.dimensions, ctx.parts.config.hidden_size)
        how, normalize = pooling_options(body.pooling, body.normalize)
        try:
            done = await ctx.embedder.embed(request, ctx, split_inputs(body.input), how, normalize)
        except ClientGone:
            return client_gone_response()
        data = [
            {"object": "embedding", "index": i, "embedding": _encoded(v, body.encoding_format)}
            for i, v in enumerate(done.vectors)
        ]
        usage = {"prompt_tokens": done.num_tokens, "total_tokens": done.num_tokens}
        return JSONResponse({"object": "list", "data": data, "model": ctx.model_name, "usage": usage})

    doc = request_body_doc(EmbeddingRequest)
    app.post("/v1/embeddings", dependencies=auth, openapi_extra=doc)(embeddings)
    app.post("/embeddings", dependencies=auth, openapi_extra=doc, include_in_schema=False)(embeddings)
