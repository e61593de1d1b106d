"""POST /v1/completions: one or more prompts continued, answered whole or streamed.

Choice index = prompt index x n + k; choice k of every prompt samples with seed + k, so a prompt sent
alone with the same seed gets the same choices it got in a batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from ..checks.prompts import check_prompts, completion_prompt_ids, split_prompts
from ..checks.sampling_params import check_vocab, completion_params, fresh_seed, per_choice, prepare_stops
from ..checks.structured import compile_structured, structured_from
from ..checks.unsupported import COMPLETION_FIELDS, check_supported
from ..state import Ready
from ..wire.errors import nesting_is_400
from ..wire.logprobs import completion_logprobs
from ..wire.protocol import CompletionChoice, CompletionChunk, CompletionRequest, CompletionResponse
from .echo import echo_logprobs, echo_text, prompt_logprobs_field, prompt_part
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

PROMPT_PARAM = "prompt"


@dataclass(frozen=True)
class PromptEcho:
    """What a stream sends about the prompt before the completion: its text (echo), its logprobs (echo with
    logprobs, top_n), vLLM's prompt_logprobs field (prompt_top_n); score_only drops the one drawn token."""

    prompts: list
    prompt_ids: list[list[int]]
    echo: bool
    top_n: int | None
    prompt_top_n: int | None
    score_only: bool


class CompletionShaper(StreamShaper):
    def __init__(self, meta: dict, logprobs: bool, include_usage: bool, ctx: Ready, echo: PromptEcho | None):
        self.meta, self.logprobs, self.include_usage, self.texts = meta, logprobs, include_usage, ctx.texts
        self.tokenizer, self.echo, self.echoed = ctx.tokenizer, echo, set()

    def _prompt_chunk(self, choice: Choice) -> CompletionChunk:
        """The first chunk of a choice: the prompt's text, logprobs and prompt_logprobs as asked."""
        e, ids = self.echo, self.echo.prompt_ids[choice.prompt]
        text = echo_text(self.tokenizer, e.prompts[choice.prompt]) if e.echo else ""
        lps = None
        if e.echo and e.top_n is not None:
            lps, choice.text_offset = prompt_part(self.texts, ids, choice.prompt_logprobs, e.top_n)
        prompt_lps = (
            prompt_logprobs_field(self.texts, choice.prompt_logprobs, e.prompt_top_n)
            if e.prompt_top_n is not None
            else None
        )
        return CompletionChunk(
            **self.meta,
            choices=[CompletionChoice(index=choice.index, text=text, logprobs=lps, prompt_logprobs=prompt_lps)],
        )

    def on_output(self, choice: Choice, output):
        if self.echo is not None and choice.index not in self.echoed:
            self.echoed.add(choice.index)
            yield self._prompt_chunk(choice)
        if self.echo is not None and self.echo.score_only:  # the drawn token is not part of the answer
            choice.completion_tokens = 0
            if output.finished:
                yield CompletionChunk(
                    **self.meta, choices=[CompletionChoice(index=choice.index, text="", finish_reason="length")]
                )
            return
        lps = None
        if self.logprobs and output.logprobs:
            lps, choice.text_offset = completion_logprobs(self.texts, output.logprobs, choice.text_offset)
        if output.text or lps is not None:
            yield CompletionChunk(
                **self.meta, choices=[CompletionChoice(index=choice.index, text=output.text, logprobs=lps)]
            )
        if output.finished:  # the finish reason comes alone, with empty text
            yield CompletionChunk(
                **self.meta, choices=[CompletionChoice(index=choice.index, text="", finish_reason=output.finish_reason)]
            )

    def finish(self, choices: list[Choice]):
        if self.include_usage:
            yield CompletionChunk(**self.meta, choices=[], usage=usage_of(choices))


async def completion(body: CompletionRequest, request: Request, ctx: Ready) -> Response:
    with nesting_is_400():
        prompts, params, seed = await prepare_completion(body, ctx)
    n = len(params)
    jobs = [(ids, p) for ids in prompts for p in params]
    group = RequestGroup(ctx.engine, len(jobs))
    await start_group(group, jobs, PROMPT_PARAM)
    choices = [Choice(i, i // n, len(prompts[i // n])) for i in range(len(jobs))]
    return await owned(group, _answer(body, request, ctx, group, choices, seed, prompts))


async def prepare_completion(body: CompletionRequest, ctx: Ready):
    """Each prompt's ids, one SamplingParams per choice of a prompt, and the seed; a 400 for what is wrong."""
    ctx.check_model(body.model)
    check_supported(body, COMPLETION_FIELDS)
    values, names = completion_params(body)
    structured, field = structured_from(body)
    if structured is not None:
        values["structured"], names["structured"] = structured, field
    texts = split_prompts(body.prompt)
    check_prompts(texts, body.n or 1, ctx.limits)  # before any tokenizing: sizes against the context
    # Off the event loop and the engine thread: encoding, the stop strings' automaton and the grammar.
    prompts = await run_in_threadpool(_prepare, ctx.tokenizer, texts, values, ctx.parts.grammars, field)
    for ids in prompts:
        ctx.limits.check_room(len(ids), values["max_tokens"], PROMPT_PARAM)
    seed = body.seed if body.seed is not None else fresh_seed()
    params = per_choice(values, names, seed, body.n or 1)
    check_vocab(params, ctx.parts.config.vocab_size)
    return prompts, params, seed


def _prepare(tokenizer, texts: list, values: dict, grammars, field: str | None) -> list[list[int]]:
    prepare_stops(values)
    compile_structured(grammars, values.get("structured"), field)
    return completion_prompt_ids(tokenizer, texts)


async def _answer(
    body: CompletionRequest,
    request: Request,
    ctx: Ready,
    group: RequestGroup,
    choices: list[Choice],
    seed: int,
    prompt_ids: list[list[int]],
) -> Response:
    meta = dict(
        id=f"cmpl-{group.ids[0].rsplit('-', 1)[0]}", model=ctx.model_name, seed=seed, created=int(time.time())
    )  # one timestamp for every chunk
    want_logprobs = body.logprobs is not None
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        echo = None
        if body.echo or body.prompt_logprobs is not None:
            score_only = bool(body.echo) and body.max_tokens == 0
            prompts = split_prompts(body.prompt)
            echo = PromptEcho(prompts, prompt_ids, bool(body.echo), body.logprobs, body.prompt_logprobs, score_only)
        return stream(group, CompletionShaper(meta, want_logprobs, include_usage, ctx, echo), choices, PROMPT_PARAM)
    try:
        await collect(request, group, choices, PROMPT_PARAM)
    except ClientGone:
        return client_gone_response()
    prompts = split_prompts(body.prompt)
    answers = [_choice(body, ctx, c, prompts[c.prompt], prompt_ids[c.prompt]) for c in choices]
    answer = CompletionResponse(**meta, usage=usage_of(choices), choices=answers)  # after _choice's counts
    return Response(answer.model_dump_json(), media_type="application/json")


def _choice(body: CompletionRequest, ctx: Ready, c: Choice, prompt, ids: list[int]) -> CompletionChoice:
    """One finished choice; with echo the prompt's text (and logprobs) come first. max_tokens=0 with echo
    scores the prompt only: the one token drawn to end the request is dropped."""
    score_only = bool(body.echo) and body.max_tokens == 0
    text, lps, gen_lps = ("" if score_only else c.text), None, ([] if score_only else c.logprobs)
    if score_only:
        c.completion_tokens, c.finish_reason = 0, "length"
    if body.echo:
        text = echo_text(ctx.tokenizer, prompt) + text
    if body.logprobs is not None:
        lps = (
            echo_logprobs(ctx.texts, ids, c.prompt_logprobs, gen_lps, body.logprobs)
            if body.echo
            else completion_logprobs(ctx.texts, gen_lps, 0)[0]
        )
    prompt_lps = (
        prompt_logprobs_field(ctx.texts, c.prompt_logprobs, body.prompt_logprobs)
        if body.prompt_logprobs is not None
        else None
    )
    return CompletionChoice(
        index=c.index, text=text, finish_reason=c.finish_reason, logprobs=lps, prompt_logprobs=prompt_lps
    )
