"""POST /v1/chat/completions: messages rendered with the model's chat template, answered whole or
streamed as chat.completion.chunk events."""

from __future__ import annotations

import time

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from ..checks.prompts import chat_prompt
from ..checks.reasoning import Thinking, thinking_of
from ..checks.sampling_params import chat_params, check_vocab, fresh_seed, per_choice, prepare_stops
from ..checks.structured import compile_structured, structured_from
from ..checks.tools import ToolRequest, compile_tools, tool_calls_of, tools_from
from ..checks.unsupported import CHAT_FIELDS, check_supported
from ..state import Ready
from ..wire.errors import bad_request, nesting_is_400
from ..wire.logprobs import TokenTexts, chat_logprobs
from ..wire.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatStreamChoice,
    Delta,
)
from .request_group import RequestGroup
from .serving import (
    Choice,
    ClientGone,
    StreamShaper,
    client_gone_response,
    collect,
    owned,
    start_group,
    stream,
    usage_of,
)
from .tool_stream import ToolCallStream, call_deltas

PROMPT_PARAM = "messages"


class ChatShaper(StreamShaper):
    def __init__(
        self, meta: dict, n: int, logprobs: bool, include_usage: bool, texts: TokenTexts, tools: ToolRequest | None
    ):
        self.meta, self.n, self.logprobs, self.include_usage, self.texts = meta, n, logprobs, include_usage, texts
        # with tools, each choice's text passes through a stream that holds back what may be a call
        self.calls = [ToolCallStream(tools) for _ in range(n)] if tools is not None and tools.is_rendered else None

    def _chunk(self, choices: list, usage=None) -> ChatCompletionChunk:
        return ChatCompletionChunk(**self.meta, choices=choices, usage=usage)

    def start(self):
        # OpenAI's first chunk of each choice names the role, with empty content.
        for i in range(self.n):
            yield self._chunk([ChatStreamChoice(index=i, delta=Delta(role="assistant", content=""))])

    def on_output(self, choice: Choice, output):
        lps = chat_logprobs(self.texts, output.logprobs) if self.logprobs and output.logprobs else None
        calls = self.calls[choice.index] if self.calls is not None else None
        # the answer alone passes the tool-call stream; the reasoning goes out as it comes
        reasoning, answer = choice.last
        text = answer if calls is None else calls.feed(answer)
        if text or reasoning or lps is not None:
            delta = Delta(content=text or None, reasoning_content=reasoning or None)
            yield self._chunk([ChatStreamChoice(index=choice.index, delta=delta, logprobs=lps)])
        if not output.finished:
            return
        finish_reason = output.finish_reason
        if calls is not None:
            rest, parsed = calls.finish()
            if rest:
                yield self._chunk([ChatStreamChoice(index=choice.index, delta=Delta(content=rest))])
            for deltas in call_deltas(parsed):
                yield self._chunk([ChatStreamChoice(index=choice.index, delta=Delta(tool_calls=deltas))])
            finish_reason = _finish_reason(finish_reason, parsed)
        # as OpenAI's: the finish reason comes alone, with an empty delta
        yield self._chunk([ChatStreamChoice(index=choice.index, delta=Delta(), finish_reason=finish_reason)])

    def finish(self, choices: list[Choice]):
        if self.include_usage:
            yield self._chunk([], usage_of(choices))


async def chat_completion(body: ChatCompletionRequest, request: Request, ctx: Ready) -> Response:
    with nesting_is_400():
        prompt, params, seed, tools, thinking = await prepare_chat(body, ctx)
    group = RequestGroup(ctx.engine, len(params))
    await start_group(group, [(prompt.ids, p) for p in params], PROMPT_PARAM)
    choices = [Choice(i, 0, len(prompt.ids), reasons=thinking.reasons) for i in range(len(params))]
    return await owned(group, _answer(body, request, ctx, group, choices, seed, tools))


async def prepare_chat(body: ChatCompletionRequest, ctx: Ready):
    """The rendered prompt, one SamplingParams per choice, the seed, the tools and the thinking; a 400 for what
    is wrong."""
    ctx.check_model(body.model)
    check_supported(body, CHAT_FIELDS)
    values, names = chat_params(body)
    tools = tools_from(body.model_extra or {}, ctx.tokenizer.chat_template)
    structured, field = _constraint(body, tools)
    if structured is not None:
        values["structured"], names["structured"] = structured, field
    thinking = thinking_of(body.model_extra or {}, ctx.tokenizer.reasoning, structured is not None)
    if thinking.reasons:  # the engine sets the think span apart, and matches stop strings in the answer only
        values["reasoning"] = True
    # Before rendering: counts and sizes (the tools' JSON with the messages' text) against the context.
    ctx.limits.check_messages(body.messages, tools.prompt_tools() if tools is not None else None)
    # Off the event loop and the engine thread: rendering, encoding, the stop strings' automaton, the grammar.
    prompt = await run_in_threadpool(_prepare, ctx, body.messages, values, tools, field, thinking)
    ctx.limits.check_room(len(prompt.ids), values["max_tokens"], PROMPT_PARAM, names["max_tokens"])
    seed = body.seed if body.seed is not None else fresh_seed()
    params = per_choice(values, names, seed, body.n or 1)
    check_vocab(params, ctx.parts.config.vocab_size)
    return prompt, params, seed, tools, thinking


def _constraint(body: ChatCompletionRequest, tools: ToolRequest | None):
    """The output's constraint and the field that asked for it: response_format and friends, or the call
    grammar of tool_choice required / a named function (never both)."""
    structured, field = structured_from(body)
    forced = tools.constraint() if tools is not None else None
    if forced is None:
        return structured, field
    if structured is not None:
        raise bad_request(f"{field} cannot be combined with tool_choice {tools.choice!r}; send one of them", field)
    return forced, "tool_choice"


def _prepare(ctx: Ready, messages, values: dict, tools: ToolRequest | None, field: str | None, thinking: Thinking):
    prepare_stops(values)
    compile_tools(ctx.parts.grammars, tools)
    compile_structured(ctx.parts.grammars, values.get("structured"), field)
    prompt_tools = tools.prompt_tools() if tools is not None else None
    # The template writes any BOS itself: none is added.
    return chat_prompt(ctx.tokenizer, messages, True, prompt_tools, thinking.variables)


def _finish_reason(finish_reason: str | None, parsed) -> str | None:
    return "tool_calls" if parsed.calls and finish_reason == "stop" else finish_reason


def _message(c: Choice, tools: ToolRequest | None) -> tuple[AssistantMessage, str | None]:
    if tools is None or not tools.is_rendered:
        return AssistantMessage(content=c.text, reasoning_content=c.reasoning), c.finish_reason
    parsed = tools.parse(c.text)
    if not parsed.calls:
        return AssistantMessage(content=c.text, reasoning_content=c.reasoning), c.finish_reason
    calls = tool_calls_of(parsed)
    message = AssistantMessage(content=parsed.content or None, tool_calls=calls, reasoning_content=c.reasoning)
    return message, _finish_reason(c.finish_reason, parsed)


async def _answer(
    body: ChatCompletionRequest,
    request: Request,
    ctx: Ready,
    group: RequestGroup,
    choices: list[Choice],
    seed: int,
    tools: ToolRequest | None,
) -> Response:
    n = len(group.ids)
    meta = dict(
        id=f"chatcmpl-{group.ids[0].rsplit('-', 1)[0]}", model=ctx.model_name, seed=seed, created=int(time.time())
    )  # one timestamp for every chunk
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        shaper = ChatShaper(meta, n, bool(body.logprobs), include_usage, ctx.texts, tools)
        return stream(group, shaper, choices, PROMPT_PARAM)
    try:
        await collect(request, group, choices, PROMPT_PARAM)
    except ClientGone:
        return client_gone_response()
    answers = []
    for c in choices:
        message, finish_reason = _message(c, tools)
        logprobs = chat_logprobs(ctx.texts, c.logprobs) if body.logprobs else None
        answers.append(ChatChoice(index=c.index, message=message, finish_reason=finish_reason, logprobs=logprobs))
    answer = ChatCompletionResponse(**meta, usage=usage_of(choices), choices=answers)
    return Response(answer.model_dump_json(), media_type="application/json")
