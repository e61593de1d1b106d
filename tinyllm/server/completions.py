"""POST /v1/completions: one or more prompts continued, answered whole or streamed.

Choice index = prompt index x n + k; choice k of every prompt samples with seed + k, so a prompt sent
alone with the same seed gets the same choices it got in a batch.
"""
from __future__ import annotations

import time

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from .group import RequestGroup
from .logprobs import TokenTexts, completion_logprobs
from .prompts import check_prompts, completion_prompt_ids, split_prompts
from .protocol import CompletionChoice, CompletionChunk, CompletionRequest, CompletionResponse
from .sampling import check_vocab, completion_params, fresh_seed, per_choice, prepare_stops
from .serving import (Choice, ClientGone, StreamShaper, client_gone_response, collect, owned, start_group,
                      stream, usage_of)
from .state import Ready
from .unsupported import COMPLETION_FIELDS, check_supported

PROMPT_PARAM = "prompt"


class CompletionShaper(StreamShaper):
    def __init__(self, meta: dict, logprobs: bool, include_usage: bool, texts: TokenTexts):
        self.meta, self.logprobs, self.include_usage, self.texts = meta, logprobs, include_usage, texts

    def on_output(self, choice: Choice, output):
        lps = None
        if self.logprobs and output.logprobs:
            lps, choice.text_offset = completion_logprobs(self.texts, output.logprobs, choice.text_offset)
        if output.text or lps is not None:
            yield CompletionChunk(**self.meta, choices=[
                CompletionChoice(index=choice.index, text=output.text, logprobs=lps)])
        if output.finished:  # the finish reason comes alone, with empty text
            yield CompletionChunk(**self.meta, choices=[
                CompletionChoice(index=choice.index, text="", finish_reason=output.finish_reason)])

    def finish(self, choices: list[Choice]):
        if self.include_usage:
            yield CompletionChunk(**self.meta, choices=[], usage=usage_of(choices))


async def completion(body: CompletionRequest, request: Request, ctx: Ready) -> Response:
    ctx.check_model(body.model)
    check_supported(body, COMPLETION_FIELDS)
    n = body.n or 1
    values, names = completion_params(body)
    texts = split_prompts(body.prompt)
    check_prompts(texts, n, ctx.limits)  # before any tokenizing: sizes against the context
    # Off the event loop and the engine thread: encoding and the stop strings' automaton.
    prompts = await run_in_threadpool(_prepare, ctx.tokenizer, texts, values)
    for ids in prompts:
        ctx.limits.check_room(len(ids), values["max_tokens"], PROMPT_PARAM)
    seed = body.seed if body.seed is not None else fresh_seed()
    params = per_choice(values, names, seed, n)
    check_vocab(params, ctx.llm.config.vocab_size)
    jobs = [(ids, p) for ids in prompts for p in params]
    group = RequestGroup(ctx.engine, len(jobs))
    await start_group(group, jobs, PROMPT_PARAM)
    choices = [Choice(i, i // n, len(prompts[i // n])) for i in range(len(jobs))]
    return await owned(group, _answer(body, request, ctx, group, choices, seed))


def _prepare(tokenizer, texts: list, values: dict) -> list[list[int]]:
    prepare_stops(values)
    return completion_prompt_ids(tokenizer, texts)


async def _answer(body: CompletionRequest, request: Request, ctx: Ready, group: RequestGroup,
                  choices: list[Choice], seed: int) -> Response:
    meta = dict(id=f"cmpl-{group.ids[0].rsplit('-', 1)[0]}", model=ctx.model_name, seed=seed,
                created=int(time.time()))  # one timestamp for every chunk
    want_logprobs = body.logprobs is not None
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return stream(group, CompletionShaper(meta, want_logprobs, include_usage, ctx.texts), choices, PROMPT_PARAM)
    try:
        await collect(request, group, choices, PROMPT_PARAM)
    except ClientGone:
        return client_gone_response()
    answer = CompletionResponse(**meta, usage=usage_of(choices), choices=[
        CompletionChoice(index=c.index, text=c.text, finish_reason=c.finish_reason,
                         logprobs=completion_logprobs(ctx.texts, c.logprobs, 0)[0] if want_logprobs else None)
        for c in choices])
    return Response(answer.model_dump_json(), media_type="application/json")
