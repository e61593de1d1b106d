"""What chat and completions share: choices accumulated from engine outputs, usage, engine failures as
HTTP errors, and running a request group to its end either whole (watching for the client leaving)
or as a server-sent-event stream."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel

from ...engine.async_engine import SHUTTING_DOWN, EngineFault, EngineStopped
from ...errors import TinyLLMError
from ...outputs import FinishReason, RequestOutput
from ...text.reasoning import Split
from ..wire.errors import APIError, bad_request
from ..wire.protocol import CompletionTokensDetails, PromptTokensDetails, Usage
from .request_group import RequestGroup

log = logging.getLogger("tinyllm.server")


@dataclass
class Choice:
    index: int
    prompt: int  # which prompt of the request it answers
    prompt_tokens: int
    pieces: list[str] = field(default_factory=list)
    logprobs: list = field(default_factory=list)
    finish_reason: str | None = None
    completion_tokens: int = 0
    cached_tokens: int = 0
    text_offset: int = 0  # completions logprobs: where the next streamed token starts
    prompt_logprobs: list | None = None  # [None, TokenLogprob, ...] when the request asked for them
    reasons: bool = False  # a reasoning model's chat answer: the engine sets its think span apart
    reasoning_pieces: list[str] = field(default_factory=list)
    reasoning_tokens: int = 0
    last: Split = Split("", "")  # the last output's reasoning and answer text

    def update(self, output) -> APIError | None:
        """Take in an output; the client's error when the request ended through its own fault."""
        self.last = Split(output.reasoning, output.text or "")
        self.reasoning_tokens = max(self.reasoning_tokens, output.reasoning_tokens)  # a cut-short output has 0
        if self.last.answer:
            self.pieces.append(self.last.answer)
        if self.last.reasoning:
            self.reasoning_pieces.append(self.last.reasoning)
        self.logprobs.extend(output.logprobs)
        if output.prompt_logprobs is not None:
            self.prompt_logprobs = output.prompt_logprobs
        self.completion_tokens = output.completion_tokens
        self.cached_tokens = output.num_cached_tokens
        if output.finished:
            self.finish_reason = output.finish_reason
        return own_fault_error(output)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def reasoning(self) -> str | None:
        """The reasoning text of the answer; None when there is none (or the model does not reason), as vLLM's."""
        return "".join(self.reasoning_pieces) or None


def usage_of(choices: list[Choice]) -> Usage:
    """Each prompt counts once however many choices it has; its cached tokens are those every one of
    its choices found in the prefix cache."""
    prompts: dict[int, tuple[int, int]] = {}
    for c in choices:
        tokens, cached = prompts.get(c.prompt, (c.prompt_tokens, c.cached_tokens))
        prompts[c.prompt] = (tokens, min(cached, c.cached_tokens))
    prompt_tokens = sum(t for t, _ in prompts.values())
    completion = sum(c.completion_tokens for c in choices)
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion,
        total_tokens=prompt_tokens + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=sum(c for _, c in prompts.values())),
        completion_tokens_details=_reasoning_details(choices),
    )


def _reasoning_details(choices: list[Choice]) -> CompletionTokensDetails | None:
    if not any(c.reasons for c in choices):
        return None
    return CompletionTokensDetails(reasoning_tokens=sum(c.reasoning_tokens for c in choices))


def own_fault_error(output) -> APIError | None:
    """The 400 for an output the engine ended with finish reason "error" for the request's own fault (only those
    reach a handler as outputs: async_engine fails the others), with the engine's message."""
    if output.finish_reason != "error":
        return None
    return bad_request(output.error or "the request's constraint failed while generating")


# A choice the server ends while shutting down finishes with OpenAI's reason for an answer cut short, which every
# client parses; the error event after it says why.
SHUTDOWN_FINISH_REASON = FinishReason.LENGTH.value


def cut_short(choice: Choice) -> RequestOutput:
    """The last output of a choice the server ends (shutting down): no text, its finish reason."""
    return RequestOutput(
        "", "", [], [], finished=True, finish_reason=SHUTDOWN_FINISH_REASON, completion_tokens=choice.completion_tokens
    )


def engine_error(exc: Exception, prompt_param: str) -> APIError:
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, TinyLLMError):  # the engine refused the prompt: empty, too long, bad ids
        return bad_request(str(exc), prompt_param)
    if isinstance(exc, EngineStopped):  # the server is shutting down, or its engine stopped by itself
        return APIError(503, str(exc), code="server_shutting_down" if str(exc) == SHUTTING_DOWN else "engine_stopped")
    if not isinstance(exc, EngineFault):
        log.error("request failed", exc_info=exc)
    return APIError(500, str(exc) if isinstance(exc, EngineFault) else f"internal error ({type(exc).__name__})")


async def start_group(group: RequestGroup, jobs: list, prompt_param: str) -> None:
    try:
        await group.start(jobs)
    except (TinyLLMError, EngineStopped, EngineFault) as exc:
        raise engine_error(exc, prompt_param) from None


async def owned(group: RequestGroup, answer: Awaitable[Response]) -> Response:
    """Await the handler's answer and close the group after it, unless the answer is a stream that was
    handed the group (it closes the group when it ends); on any failure the group is closed here."""
    handed_out = False
    try:
        response = await answer
        handed_out = isinstance(response, ClosingStream)
        return response
    finally:
        if not handed_out:
            group.close()


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


async def until_disconnected(request: Request) -> None:
    # Once the body has been read, the next ASGI message for this request is its disconnect.
    try:
        while (await request.receive())["type"] != "http.disconnect":
            pass
    except Exception:  # this connection cannot be watched: let the answer run to its end
        await asyncio.Future()


async def collect(request: Request, group: RequestGroup, choices: list[Choice], prompt_param: str) -> None:
    """Run the group to its end; abort it the moment the client disconnects."""

    async def run() -> None:
        async for i, output in group.outputs():
            error = choices[i].update(output)
            if error is not None:  # before the first byte: the whole answer is this error
                raise error

    work, watch = asyncio.ensure_future(run()), asyncio.ensure_future(until_disconnected(request))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            raise ClientGone()
        try:
            work.result()
        except Exception as exc:
            raise engine_error(exc, prompt_param) from None
    finally:
        for task in (work, watch):
            task.cancel()
        group.close()


def client_gone_response() -> Response:
    # Nobody reads it; 499 is the customary "client closed request" in access logs.
    return Response(status_code=499)


def _sse(model: BaseModel | dict) -> str:
    body = model.model_dump_json() if isinstance(model, BaseModel) else json.dumps(model)
    return f"data: {body}\n\n"


class ClosingStream(StreamingResponse):
    """A streamed response that runs `on_close` however it ends: finished, failed, or cut off by the client
    (Starlette then cancels the body iterator, which may never resume to clean up)."""

    def __init__(self, body: AsyncIterator[str], on_close: Callable[[], None], media_type: str, headers: dict):
        super().__init__(body, media_type=media_type, headers={"Cache-Control": "no-cache", **headers})
        self._on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


class EventStream(ClosingStream):
    """Server-sent events (OpenAI's streams)."""

    def __init__(self, events: AsyncIterator[str], on_close: Callable[[], None]):
        super().__init__(events, on_close, "text/event-stream", {"X-Accel-Buffering": "no"})


class StreamShaper:
    """Turns engine outputs into chunks; chat and completions each implement one."""

    def start(self) -> Iterable[BaseModel]:
        return ()

    def on_output(self, choice: Choice, output) -> Iterable[BaseModel]:
        raise NotImplementedError

    def finish(self, choices: list[Choice]) -> Iterable[BaseModel]:
        return ()


async def _events(
    group: RequestGroup, shaper: StreamShaper, choices: list[Choice], prompt_param: str
) -> AsyncIterator[str]:
    try:
        for chunk in shaper.start():
            yield _sse(chunk)
        async for i, output in group.outputs():
            error = choices[i].update(output)
            for chunk in shaper.on_output(choices[i], output):  # its finish reason "error" among them
                yield _sse(chunk)
            if error is not None:  # that choice ended; the others go on
                yield _sse(error.body())
        for chunk in shaper.finish(choices):
            yield _sse(chunk)
    except Exception as exc:  # headers are sent: the error travels as an event, as OpenAI's does
        if isinstance(exc, EngineStopped):  # the server ends the answer: each open choice gets its finish first
            for choice in (c for c in choices if c.finish_reason is None):
                output = cut_short(choice)
                choice.update(output)
                for chunk in shaper.on_output(choice, output):
                    yield _sse(chunk)
        yield _sse(engine_error(exc, prompt_param).body())
    finally:
        group.close()
    yield "data: [DONE]\n\n"


def stream(group: RequestGroup, shaper: StreamShaper, choices: list[Choice], prompt_param: str) -> EventStream:
    return EventStream(_events(group, shaper, choices, prompt_param), group.close)
