"""Running one Ollama request on the engine and answering it: whole (stream: false) or as newline-delimited
JSON, one object per engine output, then a last one with `done: true`, `done_reason` and the request's counts
and times (and, when the server ends the answer because it is shutting down, done_reason "length" and an `error`).

The times are the server's, in nanoseconds: total_duration from the request's arrival to its last token,
prompt_eval_duration from the engine accepting it to its first token (waiting for a slot included),
eval_duration from the first token to the last; load_duration is 0 (the model was loaded at start).
prompt_eval_count is the prompt's tokens, eval_count the answer's.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from ...engine.async_engine import EngineStopped
from ...sampling.params import SamplingParams
from ..checks.tools import ToolRequest
from ..endpoints.request_group import RequestGroup
from ..endpoints.serving import (
    Choice,
    ClientGone,
    ClosingStream,
    client_gone_response,
    collect,
    cut_short,
    engine_error,
    start_group,
)
from ..endpoints.tool_stream import ToolCallStream
from ..state import Ready
from ..wire.logprobs import TokenTexts, chat_logprobs
from .protocol import STREAM_MEDIA_TYPE, created_at, nanos


@dataclass
class Tracked(Choice):
    """A choice that also keeps its token ids and when its first and last tokens came."""

    ids: list[int] = field(default_factory=list)
    first_token: float | None = None
    end: float | None = None

    def update(self, output):
        now = time.perf_counter()
        if output.token_ids and self.first_token is None:
            self.first_token = now
        self.ids.extend(output.token_ids)
        if output.finished:
            self.end = now
        return super().update(output)


@dataclass(frozen=True)
class Job:
    """What runs: the prompt's ids, its SamplingParams, the tools (chat), the request field a bad prompt is
    reported under, whether the answer returns the conversation's ids (generate's `context`), and whether the
    model reasons (its answer's think span comes apart, as `thinking`)."""

    ids: list[int]
    params: SamplingParams
    tools: ToolRequest | None
    param: str
    returns_context: bool
    reasons: bool = False

    def choice(self) -> Tracked:
        return Tracked(0, 0, len(self.ids), reasons=self.reasons)


class Shape:
    """An answer's objects: `message` pieces for chat, `response` pieces for generate."""

    def __init__(self, model: str, is_chat: bool, texts: TokenTexts, want_logprobs: bool):
        self.model, self.is_chat, self.texts, self.want_logprobs = model, is_chat, texts, want_logprobs

    def piece(
        self, text: str, logprobs: list | None = None, calls: list | None = None, done: bool = False, thinking=None
    ) -> dict:
        out: dict = {"model": self.model, "created_at": created_at()}
        if self.is_chat:
            out["message"] = {"role": "assistant", "content": text}
            if thinking:
                out["message"]["thinking"] = thinking
            if calls:
                out["message"]["tool_calls"] = calls
        else:
            out["response"] = text
            if thinking:
                out["thinking"] = thinking
        if self.want_logprobs and logprobs:
            out["logprobs"] = [lp.model_dump(exclude_none=True) for lp in chat_logprobs(self.texts, logprobs).content]
        out["done"] = done
        return out

    def done(self, job: Job, choice: Tracked, accepted: float, arrival: float) -> dict:
        end = choice.end or time.perf_counter()
        first = choice.first_token or end
        out = {
            "done_reason": choice.finish_reason,
            "total_duration": nanos(end - arrival),
            "load_duration": 0,
            "prompt_eval_count": choice.prompt_tokens,
            "prompt_eval_duration": nanos(first - accepted),
            "eval_count": choice.completion_tokens,
            "eval_duration": nanos(end - first),
        }
        if job.returns_context:
            out["context"] = [*job.ids, *choice.ids]
        return out


def load_answer(model: str, is_chat: bool, reason: str = "load") -> dict:
    """Ollama's answer to a request with nothing to generate: the model is loaded (or, "unload", unloaded)."""
    out: dict = {"model": model, "created_at": created_at()}
    out.update({"message": {"role": "assistant", "content": ""}} if is_chat else {"response": ""})
    return {**out, "done": True, "done_reason": reason}


def unload_answer(model: str, is_chat: bool) -> dict:
    return load_answer(model, is_chat, "unload")


def ollama_calls(parsed) -> list[dict]:
    """Parsed calls as Ollama writes them: arguments as an object, not JSON text."""
    return [{"function": {"name": c.name, "arguments": json.loads(c.arguments)}} for c in parsed.calls]


def _line(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


async def answer(request: Request, ctx: Ready, job: Job, shape: Shape, stream: bool, arrival: float) -> Response:
    group = RequestGroup(ctx.engine, 1)
    await start_group(group, [(job.ids, job.params)], job.param)
    accepted = time.perf_counter()
    choice = job.choice()
    if stream:
        return ClosingStream(_lines(group, choice, job, shape, accepted, arrival), group.close, STREAM_MEDIA_TYPE, {})
    try:
        await collect(request, group, [choice], job.param)  # closes the group
    except ClientGone:
        return client_gone_response()
    content, calls = choice.text, None
    if job.tools is not None and job.tools.is_rendered:
        parsed = job.tools.parse(choice.text)
        if parsed.calls:
            content, calls = parsed.content, ollama_calls(parsed)
    whole = shape.piece(content, choice.logprobs, calls, done=True, thinking=choice.reasoning)
    return JSONResponse({**whole, **shape.done(job, choice, accepted, arrival)})


async def _lines(
    group: RequestGroup, choice: Tracked, job: Job, shape: Shape, accepted: float, arrival: float
) -> AsyncIterator[str]:
    held = ToolCallStream(job.tools) if job.tools is not None and job.tools.is_rendered else None
    try:
        async for _, output in group.outputs():
            error = choice.update(output)
            thinking, answer_text = choice.last  # the answer alone passes the tool-call stream
            text = answer_text if held is None else held.feed(answer_text)
            if text or thinking or (shape.want_logprobs and output.logprobs):
                yield _line(shape.piece(text or "", output.logprobs, thinking=thinking))
            if error is not None:
                yield _line({"error": error.message})
                return
        if held is not None:
            rest, parsed = held.finish()
            if rest or parsed.calls:
                yield _line(shape.piece(rest, calls=ollama_calls(parsed)))
        yield _line({**shape.piece(""), "done": True, **shape.done(job, choice, accepted, arrival)})
    except EngineStopped as exc:  # the server ends the answer: its last object, done, and why
        choice.update(cut_short(choice))
        done = {**shape.piece(""), "done": True, **shape.done(job, choice, accepted, arrival)}
        yield _line({**done, "error": engine_error(exc, job.param).message})
    except Exception as exc:  # the status line is sent: the error travels as a line, as Ollama's does
        yield _line({"error": engine_error(exc, job.param).message})
    finally:
        group.close()
