"""JSON request bodies parsed and validated in a worker thread, with counts checked before validation.

FastAPI parses and validates a declared body on the event loop: 400,000 chat messages cost seconds of
validation there (one model per message), and /health and every running stream freeze for all of it even
though the request ends in a 400. Here the raw bytes are parsed in a worker thread; a cheap check of the
counts (messages, prompts, token ids) against the context refuses an oversized body before validation
builds anything; validation then runs in the thread too. json.loads holds the GIL while it runs (up to a
few hundred milliseconds per MB of small values), so a thread alone does not free the loop: a body over
YIELDING_PARSE_BYTES is parsed by yielding_json.py instead, which lets the loop run between pieces. Before
json.loads, the depth of nested arrays and objects is bounded on the raw bytes (json_depth.py; the yielding
parse counts it as it goes): the parser and everything after it recurse per level.

A body is read as JSON whatever its Content-Type (`curl -d` sends a form's type, some clients none): what keeps
a web page on another origin from driving the server is the Origin guard (origins.py), not the content type.

Routes that parse this way declare their body for the OpenAPI schema with `request_body_doc`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import models_json_schema

from ..checks.admission import PromptLimits
from ..wire.client_text import clip
from ..wire.errors import APIError, bad_request
from ..wire.json_depth import deep_field, nests_deeper_than
from ..wire.limits import MAX_JSON_DEPTH, MAX_PROMPTS
from .yielding_json import TooDeep, loads_yielding

Model = TypeVar("Model", bound=BaseModel)
CountCheck = Callable[[dict], None]
_REF = "#/components/schemas/{model}"
# Bodies above this are parsed in pieces (yielding_json.py), the event loop running between them; below it
# json.loads holds the loop for tens of milliseconds at most.
YIELDING_PARSE_BYTES = 1 << 20


PEEKED = "tinyllm.json"  # the scope key of a body parsed before its route (peek_json)


async def peek_json(request: Request) -> object:
    """The body's JSON, parsed once (here, off the loop) and kept for parse_body: what a dependency reads before
    the route parses the body (the model it names). 400 for a body that is not JSON."""
    if PEEKED not in request.scope:
        raw = await request.body()
        request.scope[PEEKED] = await run_in_threadpool(_load_any, raw)
    return request.scope[PEEKED]


async def parse_body(request: Request, model: type[Model], check_counts: CountCheck | None = None) -> Model:
    """The request's body as `model`; 400 for a body that is not a JSON object or fails validation."""
    if PEEKED in request.scope:
        return await run_in_threadpool(_validate, request.scope[PEEKED], model, check_counts)
    raw = await request.body()
    return await run_in_threadpool(_parse, raw, model, check_counts)


def _load_any(raw: bytes) -> object:
    return _load_yielding(raw) if len(raw) > YIELDING_PARSE_BYTES else _load(raw)


def _parse(raw: bytes, model: type[Model], check_counts: CountCheck | None) -> Model:
    return _validate(_load_any(raw), model, check_counts)


def _validate(data: object, model: type[Model], check_counts: CountCheck | None) -> Model:
    if not isinstance(data, dict):
        raise bad_request(f"the request body must be a JSON object, got a JSON {type(data).__name__}")
    if check_counts is not None:
        check_counts(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:  # answered as FastAPI's own validation errors are
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None


def _load(raw: bytes) -> object:
    if nests_deeper_than(raw, MAX_JSON_DEPTH):
        raise _too_deep(raw)
    try:
        return json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bytes that are not UTF-8
        raise _not_json(exc) from None
    except RecursionError:  # only text that is not JSON gets past the depth check this deep
        raise bad_request("the request body is not valid JSON (it nests too deeply to read)") from None


def _load_yielding(raw: bytes) -> object:
    try:
        return loads_yielding(raw, MAX_JSON_DEPTH)
    except TooDeep:
        raise _too_deep(raw) from None
    except ValueError as exc:
        raise _not_json(exc) from None


def _too_deep(raw: bytes) -> APIError:
    field = deep_field(raw, MAX_JSON_DEPTH)
    where = "the request body" if field is None else clip(field, 100)
    return bad_request(
        f"{where} nests arrays and objects past the limit of {MAX_JSON_DEPTH} levels (counted from the body)", field
    )


def _not_json(exc: ValueError) -> APIError:
    return bad_request(f"the request body is not valid JSON ({exc})")


# ---- count checks on the parsed, not yet validated body (wrong types are left to validation)
def chat_counts(limits: PromptLimits) -> CountCheck:
    def check(data: dict) -> None:
        messages = data.get("messages")
        if isinstance(messages, list):
            limits.check_message_count(len(messages))

    return check


def ids_counts(limits: PromptLimits, param: str) -> CountCheck:
    """A field of token ids (Ollama's generate `context`) against the context."""

    def check(data: dict) -> None:
        ids = data.get(param)
        if isinstance(ids, list):
            limits.check_ids(len(ids), param)

    return check


def responses_counts(limits: PromptLimits) -> CountCheck:
    def check(data: dict) -> None:
        items = data.get("input")
        if isinstance(items, list):
            limits.check_message_count(len(items))

    return check


def completion_counts(limits: PromptLimits) -> CountCheck:
    def check(data: dict) -> None:
        prompt = data.get("prompt")
        if not isinstance(prompt, list) or not prompt:
            return
        if isinstance(prompt[0], int):  # one prompt of token ids
            limits.check_ids(len(prompt), "prompt")
            return
        if len(prompt) > MAX_PROMPTS:
            raise bad_request(
                f"prompt is a list of {len(prompt)} prompts, more than the {MAX_PROMPTS} one request may ask for",
                "prompt",
            )
        for p in prompt:
            if isinstance(p, list):
                limits.check_ids(len(p), "prompt")

    return check


# ---- the OpenAPI schema of bodies FastAPI does not parse itself
def request_body_doc(model: type[BaseModel]) -> dict:
    """openapi_extra for a route whose body is `model` (its schema is added by add_body_schemas)."""
    ref = {"$ref": _REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def add_body_schemas(app: FastAPI, models: list[type[BaseModel]]) -> None:
    """Put the models' schemas into the app's OpenAPI components, where request_body_doc points."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = build()
            _, defs = models_json_schema([(m, "validation") for m in models], ref_template=_REF)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, value in defs.get("$defs", {}).items():
                components.setdefault(name, value)
        return app.openapi_schema

    app.openapi = openapi
