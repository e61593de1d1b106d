"""The model's tokenizer over HTTP, as vLLM serves it: POST /tokenize (a prompt, or messages and tools rendered
exactly as a chat request renders them), POST /detokenize, and GET /tokenizer_info (the special tokens, the
context length and the chat template), which lm-eval's `tokenizer_backend=remote` reads.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool

from ...errors import TinyLLMError
from ..checks.prompts import chat_prompt, encode_text
from ..checks.tools import ToolRequest, tools_from
from ..state import Ready
from ..transport.body import chat_counts, parse_body, request_body_doc
from ..wire.errors import bad_request, nesting_is_400
from ..wire.protocol import DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse


def add_tokenizer_routes(app: FastAPI, auth: list, ready) -> None:
    @app.post(
        "/tokenize", dependencies=auth, response_model=TokenizeResponse, openapi_extra=request_body_doc(TokenizeRequest)
    )
    async def tokenize(request: Request, ctx: Ready = Depends(ready)) -> TokenizeResponse:
        """Token ids of a prompt, or of messages (and tools) rendered with the chat template as chat would send."""
        body = await parse_body(request, TokenizeRequest, chat_counts(ctx.limits))
        with nesting_is_400():
            ids = await _tokenize(body, ctx)
        return TokenizeResponse(tokens=ids, count=len(ids), max_model_len=ctx.context_length)

    @app.post(
        "/detokenize",
        dependencies=auth,
        response_model=DetokenizeResponse,
        openapi_extra=request_body_doc(DetokenizeRequest),
    )
    async def detokenize(request: Request, ctx: Ready = Depends(ready)) -> DetokenizeResponse:
        body = await parse_body(request, DetokenizeRequest)
        ctx.check_model(body.model)
        try:
            return DetokenizeResponse(prompt=ctx.tokenizer.decode(body.tokens))
        except TinyLLMError as exc:
            raise bad_request(str(exc), "tokens") from None

    @app.get("/tokenizer_info", dependencies=auth)
    async def tokenizer_info(ctx: Ready = Depends(ready)) -> dict:
        """The tokenizer's configuration, in the shape of vLLM's answer (a Hugging Face tokenizer's settings)."""
        return tokenizer_config(ctx.tokenizer, ctx.context_length)


async def _tokenize(body: TokenizeRequest, ctx: Ready) -> list[int]:
    ctx.check_model(body.model)
    if (body.prompt is None) == (body.messages is None):
        sent = "both" if body.prompt is not None else "neither"
        raise bad_request(f"send exactly one of prompt (text) or messages (a chat), got {sent}")
    if body.prompt is not None:
        if body.tools is not None:
            raise bad_request("tools are rendered with messages; send messages, or leave tools out", "tools")
        ctx.limits.check_text(len(body.prompt), "prompt")
        add_special = body.add_special_tokens is not False
        return await run_in_threadpool(encode_text, ctx.tokenizer, body.prompt, add_special)
    # The same checks, and the same rendering, as a chat request's: the count is the prompt_tokens it would use.
    tools = tools_from({"tools": body.tools, "tool_choice": body.tool_choice}, ctx.tokenizer.chat_template)
    ctx.limits.check_messages(body.messages, tools.prompt_tools() if tools is not None else None)
    return await run_in_threadpool(_chat_ids, ctx.tokenizer, body, tools)


def _chat_ids(tok, body: TokenizeRequest, tools: ToolRequest | None) -> list[int]:
    add_prompt = True if body.add_generation_prompt is None else body.add_generation_prompt
    # Like chat: the template writes any special tokens itself, so none are added unless asked.
    ids = chat_prompt(tok, body.messages, add_prompt, tools.prompt_tools() if tools is not None else None).ids
    return [tok.bos_id, *ids] if body.add_special_tokens and tok.add_bos else ids


def _token(tok, token_id: int | None) -> str | None:
    return None if token_id is None else tok.hf.id_to_token(token_id)


def tokenizer_config(tok, context_length: int) -> dict:
    """What vLLM's /tokenizer_info gives: the tokenizer's class and settings, its special tokens as text, the
    context length as model_max_length, and the chat template when the model has one."""
    config = {
        "tokenizer_class": type(tok).__name__,
        "kind": tok.kind,
        "vocab_size": tok.vocab_size,
        "model_max_length": context_length,
        "bos_token": _token(tok, tok.bos_id),
        "eos_token": _token(tok, tok.eos_id),
        "pad_token": None,
        "add_bos_token": tok.add_bos,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,  # decode is byte for byte
    }
    if tok.chat_template is not None:
        config["chat_template"] = tok.chat_template
    return config
