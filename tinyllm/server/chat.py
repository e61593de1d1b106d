"""POST /v1/chat/completions: messages rendered with the model's chat template, answered whole or
streamed as chat.completion.chunk events."""

from __future__ import annotations

import time

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from .group import RequestGroup
from .logprobs import TokenTexts, chat_logprobs
from .prompts import chat_prompt_ids
from .protocol import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatStreamChoice,
    Delta,
)
from .sampling import chat_params, check_vocab, fresh_seed, per_choice, prepare_stops
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
from .state import Ready
from .structured import compile_structured, structured_from
from .unsupported import CHAT_FIELDS, check_supported

PROMPT_PARAM = "messages"


class ChatShaper(StreamShaper):
    def __init__(self, meta: dict, n: int, logprobs: bool, include_usage: bool, texts: TokenTexts):
        self.meta, self.n, self.logprobs, self.include_usage, self.texts = meta, n, logprobs, include_usage, texts

    def _chunk(self, choices: list, usage=None) -> ChatCompletionChunk:
        return ChatCompletionChunk(**self.meta, choices=choices, usage=usage)

    def start(self):
        # OpenAI's first chunk of each choice names the role, with empty content.
        for i in range(self.n):
            yield self._chunk([ChatStreamChoice(index=i, delta=Delta(role="assistant", content=""))])

    def on_output(self, choice: Choice, output):
        lps = chat_logprobs(self.texts, output.logprobs) if self.logprobs and output.logprobs else None
        if output.text or lps is not None:
            yield self._chunk(
                [ChatStreamChoice(index=choice.index, delta=Delta(content=output.text or None), logprobs=lps)]
            )
        if output.finished:  # as OpenAI's: the finish reason comes alone, with an empty delta
            yield self._chunk([ChatStreamChoice(index=choice.index, delta=Delta(), finish_reason=output.finish_reason)])

    def finish(self, choices: list[Choice]):
        if self.include_usage:
            yield self._chunk([], usage_of(choices))


async def chat_completion(body: ChatCompletionRequest, request: Request, ctx: Ready) -> Response:
    ctx.check_model(body.model)
    check_supported(body, CHAT_FIELDS)
    values, names = chat_params(body)
    structured, field = structured_from(body)
    if structured is not None:
        values["structured"], names["structured"] = structured, field
    ctx.limits.check_messages(body.messages)  # before rendering: counts and sizes against the context
    # Off the event loop and the engine thread: rendering, encoding, the stop strings' automaton, the grammar.
    ids = await run_in_threadpool(_prepare, ctx.tokenizer, body.messages, values, ctx.llm.grammars, field)
    ctx.limits.check_room(len(ids), values["max_tokens"], PROMPT_PARAM)
    seed = body.seed if body.seed is not None else fresh_seed()
    params = per_choice(values, names, seed, body.n or 1)
    check_vocab(params, ctx.llm.config.vocab_size)
    group = RequestGroup(ctx.engine, len(params))
    await start_group(group, [(ids, p) for p in params], PROMPT_PARAM)
    return await owned(group, _answer(body, request, ctx, group, len(ids), seed))


def _prepare(tokenizer, messages, values: dict, grammars, field: str | None) -> list[int]:
    prepare_stops(values)
    compile_structured(grammars, values.get("structured"), field)
    return chat_prompt_ids(tokenizer, messages)


async def _answer(
    body: ChatCompletionRequest, request: Request, ctx: Ready, group: RequestGroup, prompt_tokens: int, seed: int
) -> Response:
    n = len(group.ids)
    choices = [Choice(i, 0, prompt_tokens) for i in range(n)]
    meta = dict(
        id=f"chatcmpl-{group.ids[0].rsplit('-', 1)[0]}", model=ctx.model_name, seed=seed, created=int(time.time())
    )  # one timestamp for every chunk
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        shaper = ChatShaper(meta, n, bool(body.logprobs), include_usage, ctx.texts)
        return stream(group, shaper, choices, PROMPT_PARAM)
    try:
        await collect(request, group, choices, PROMPT_PARAM)
    except ClientGone:
        return client_gone_response()
    answer = ChatCompletionResponse(
        **meta,
        usage=usage_of(choices),
        choices=[
            ChatChoice(
                index=c.index,
                message=AssistantMessage(content=c.text),
                finish_reason=c.finish_reason,
                logprobs=chat_logprobs(ctx.texts, c.logprobs) if body.logprobs else None,
            )
            for c in choices
        ],
    )
    return Response(answer.model_dump_json(), media_type="application/json")
