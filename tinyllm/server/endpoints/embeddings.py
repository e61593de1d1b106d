"""POST /v1/embeddings, in OpenAI's shape: `input` as text, texts, token ids or lists of ids; `encoding_format`
"float" or "base64" (little-endian float32, as OpenAI's SDK asks by default); `dimensions` only as the model's
own width. Two extras: `pooling` ("mean", the default, or "last") and `normalize` (default true). Each vector is
the model's final hidden states after its final norm, pooled (model/pooling.py).

Limits, checked before the work: at most MAX_INPUTS inputs, each within the context, at most MAX_TOTAL_TOKENS
tokens together. Embeddings run in a worker thread beside the engine's thread, one request's batch at a time.
"""

from __future__ import annotations

import base64
import threading
from dataclasses import dataclass
from typing import Literal

import torch
from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from ...embedding import check_embeddable, pooling_of
from ...errors import TinyLLMError
from ...model.pooling import Pooling, embed_ids
from ..checks.admission import PromptLimits, context_error
from ..checks.prompts import encode_text
from ..state import Ready
from ..transport.body import parse_body, request_body_doc
from ..wire.errors import bad_request

MAX_INPUTS = 2048  # inputs in one request, as OpenAI's API allows
MAX_TOTAL_TOKENS = 1 << 16  # tokens of all inputs together: bounds one request's work
PROMPT_PARAM = "input"
Inputs = str | list[str] | list[int] | list[list[int]]


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    model: str | None = None
    input: Inputs
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = None
    user: str | None = None
    pooling: str | None = None  # not OpenAI's: "mean" (default) or "last"
    normalize: bool | None = None  # not OpenAI's: L2-normalize each vector (default true)


@dataclass(frozen=True)
class Embedded:
    vectors: torch.Tensor  # float32 [N, C]
    num_tokens: int  # of every input together


def split_inputs(value: Inputs, param: str = PROMPT_PARAM) -> list:
    """The inputs of a request (text, texts, ids, lists of ids), at least one and at most MAX_INPUTS."""
    items = [value] if isinstance(value, str) or (value and isinstance(value[0], int)) else list(value)
    if not items:
        raise bad_request(f"{param} is an empty list; expected text, token ids, or a list of them", param)
    if len(items) > MAX_INPUTS:
        raise bad_request(f"{param} has {len(items)} inputs, more than the limit of {MAX_INPUTS}", param)
    return items


def input_counts(limits: PromptLimits, param: str = PROMPT_PARAM):
    """The body's check before validation: the input count, and each id list against the context."""

    def check(data: dict) -> None:
        value = data.get(param)
        if not isinstance(value, list) or not value:
            return
        lists = [value] if isinstance(value[0], int) else [v for v in value if isinstance(v, list)]
        if len(value) > MAX_INPUTS and len(lists) != 1:
            raise bad_request(f"{param} has {len(value)} inputs, more than the limit of {MAX_INPUTS}", param)
        for i, ids in enumerate(lists):
            _check_length(len(ids), limits.context_length, f"{param}[{i}]" if ids is not value else param, param)

    return check


def _check_length(num_ids: int, context: int, where: str, param: str) -> None:
    if num_ids > context:
        raise context_error(f"{where} has {num_ids} tokens, more than the model's context of {context}", param)


def _ids(ctx: Ready, items: list, param: str, truncate: bool, context: int | None) -> list[list[int]]:
    """Each input's ids, checked against the context (or cut to it when truncate) and the total; `context` is
    the request's own, at most the model's."""
    vocab, context = ctx.llm.config.vocab_size, context or ctx.context_length
    out = []
    for i, item in enumerate(items):
        if not item:
            raise bad_request(f"{param}[{i}] is empty; expected at least one character or token id", param)
        ids = encode_text(ctx.tokenizer, item) if isinstance(item, str) else item
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise bad_request(f"{param}[{i}] has token id {bad}, outside the vocabulary [0, {vocab})", param)
        if not truncate:
            _check_length(len(ids), context, f"{param}[{i}]", param)
        out.append(ids[:context])
    total = sum(len(ids) for ids in out)
    if total > MAX_TOTAL_TOKENS:
        raise bad_request(
            f"{param} has {total} tokens together, more than the limit of {MAX_TOTAL_TOKENS} for one request", param
        )
    return out


class Embedder:
    """Embeds for one app: requests take turns, each one batch at a time, off the event loop."""

    def __init__(self):
        self._lock = threading.Lock()

    async def embed(
        self,
        ctx: Ready,
        items: list,
        pooling: Pooling,
        normalize: bool,
        param: str = PROMPT_PARAM,
        *,
        truncate: bool = False,
        context: int | None = None,
    ) -> Embedded:
        try:
            check_embeddable(ctx.llm)
        except TinyLLMError as exc:
            raise bad_request(f"this server cannot embed: {exc}") from None
        for i, item in enumerate(items):
            if isinstance(item, str):
                ctx.limits.check_text(len(item), f"{param}[{i}]")
        ids = await run_in_threadpool(_ids, ctx, items, param, truncate, context)
        return await run_in_threadpool(self._run, ctx.llm.model, ids, pooling, normalize)

    def _run(self, model, ids: list[list[int]], pooling: Pooling, normalize: bool) -> Embedded:
        with self._lock:
            vectors = embed_ids(model, ids, pooling, normalize)
        return Embedded(vectors, sum(len(x) for x in ids))


def pooling_options(pooling: str | None, normalize: bool | None) -> tuple[Pooling, bool]:
    try:
        how = pooling_of(pooling or Pooling.MEAN.value)
    except TinyLLMError as exc:
        raise bad_request(str(exc), "pooling") from None
    return how, normalize is not False


def check_dimensions(dimensions: int | None, ctx: Ready, param: str = "dimensions") -> None:
    width = ctx.llm.config.hidden_size
    if dimensions is not None and dimensions != width:
        raise bad_request(
            f"{param} {dimensions} is not supported: this model's embeddings have {width} dimensions; "
            f"send {width} or leave {param} out",
            param,
        )


def _encoded(vector: torch.Tensor, encoding_format: str | None) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.numpy().astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def add_embedding_routes(app: FastAPI, auth: list, ready, embedder: Embedder) -> None:
    async def embeddings(request: Request, ctx: Ready = Depends(ready)) -> JSONResponse:
        """Pooled final hidden states of each input (see the `pooling` and `normalize` extras)."""
        body = await parse_body(request, EmbeddingRequest, input_counts(ctx.limits))
        ctx.check_model(body.model)
        check_dimensions(body.dimensions, ctx)
        how, normalize = pooling_options(body.pooling, body.normalize)
        done = await embedder.embed(ctx, split_inputs(body.input), how, normalize)
        data = [
            {"object": "embedding", "index": i, "embedding": _encoded(v, body.encoding_format)}
            for i, v in enumerate(done.vectors)
        ]
        usage = {"prompt_tokens": done.num_tokens, "total_tokens": done.num_tokens}
        return JSONResponse({"object": "list", "data": data, "model": ctx.model_name, "usage": usage})

    doc = request_body_doc(EmbeddingRequest)
    app.post("/v1/embeddings", dependencies=auth, openapi_extra=doc)(embeddings)
    app.post("/embeddings", dependencies=auth, openapi_extra=doc, include_in_schema=False)(embeddings)
