"""Ollama's chat and generate requests as the OpenAI requests they amount to, so that they are checked, rendered
and sampled exactly as /v1/chat/completions and /v1/completions do it (chat.py, completions.py): the same
limits, tools, structured outputs and SamplingParams, hence the same text for the same seed.

`format` "json" is response_format json_object and a JSON schema is response_format json_schema with strict
on (an object that does not state additionalProperties takes no other keys, as in Ollama); `tools` are
OpenAI's tools already. A past assistant turn's tool_calls get their arguments as JSON text, as OpenAI's API
sends them. `think` true/false is the template's enable_thinking (an effort, "low" to "high", turns it on),
and a past assistant turn's `thinking` is its reasoning_content, for a model that reasons; for one that does
not, asking for thinking is a 400. Fields of Ollama's API that would change the answer and that this server does
not honour (images, a template of one's own, a suffix) are a 400 naming them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..wire.client_text import clip
from ..wire.errors import APIError, bad_request
from ..wire.protocol import ChatCompletionRequest, CompletionRequest
from .options import Sampling
from .protocol import ChatBody, GenerateBody, Message

# The OpenAI request's field -> the Ollama request's, for error messages
RENAMED = {
    "response_format": "format",
    "max_tokens": "options.num_predict",
    "stop": "options.stop",
    "chat_template_kwargs": "think",
    "reasoning_effort": "think",
}
LATEST = ":latest"  # Ollama's default tag: "name:latest" is the model "name"


def model_name(model: str | None) -> str | None:
    return model.removesuffix(LATEST) if model else model


def renamed(exc: APIError, names: dict | None = None) -> APIError:
    """The error with the OpenAI field it names spelled as the Ollama request spells it."""
    names = {**RENAMED, **(names or {})}
    new = names.get(exc.param or "")
    if new is None:
        return exc
    message = re.sub(rf"\b{re.escape(exc.param)}\b", new, exc.message)
    return APIError(exc.status, message if new in message else f"{new}: {message}", param=new, code=exc.code)


def refuse_unsupported(body: ChatBody | GenerateBody, reasons: bool) -> None:
    """A 400 for what this server or model does not do; `reasons`: the model thinks before it answers."""
    if body.think not in (None, False) and not reasons:
        raise bad_request(f"think {body.think!r} is not supported: this model does not reason; leave it out", "think")
    if isinstance(body, GenerateBody):
        if body.images:
            raise bad_request("images are not supported: this model reads text only", "images")
        if body.suffix:
            raise bad_request("suffix is not supported: this server does not fill in the middle", "suffix")
        if body.template:
            raise bad_request(
                "template is not supported: the model's own chat template is used; send raw: true with the "
                "prompt written out to use another",
                "template",
            )
        if body.raw and body.system:
            raise bad_request("system is not used with raw: true; write it into the prompt", "system")
    if body.top_logprobs is not None and not body.logprobs:
        raise bad_request("top_logprobs needs logprobs to be true", "top_logprobs")


def response_format(value: str | dict | None) -> dict | None:
    if value in (None, ""):
        return None
    if value == "json":
        return {"type": "json_object"}
    if isinstance(value, dict):
        # Ollama (llama.cpp's schema converter) takes an object that does not state additionalProperties as
        # closed; its clients send pydantic's schemas, which do not: strict closes them the same way.
        return {"type": "json_schema", "json_schema": {"name": "format", "schema": value, "strict": True}}
    raise bad_request(f'format must be "json" or a JSON schema object, got {value!r}', "format")


def _tool_call(i: int, call: Any) -> dict:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        shape = '{"function": {"name": ..., "arguments": {...}}}'
        raise bad_request(f"messages[].tool_calls[{i}] must be {shape}, got {clip(repr(call))}", "messages")
    args = fn.get("arguments", {})
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return {"id": f"call_{i}", "type": "function", "function": {"name": fn["name"], "arguments": text}}


def openai_message(i: int, m: Message, reasons: bool = False) -> dict:
    if m.images:
        raise bad_request(f"messages[{i}].images are not supported: this model reads text only", "messages")
    if m.thinking and not reasons:
        raise bad_request(f"messages[{i}].thinking is not supported: this model does not reason", "messages")
    message: dict = {"role": m.role, "content": m.content}
    if m.thinking:
        message["reasoning_content"] = m.thinking  # the template keeps or drops it, as the model's own does
    if m.tool_calls:
        message["tool_calls"] = [_tool_call(j, c) for j, c in enumerate(m.tool_calls)]
    if m.tool_name is not None:
        message["name"] = m.tool_name
    return message


def _sampling_fields(body: ChatBody | GenerateBody, sampling: Sampling) -> dict:
    fields = {**sampling.fields}
    if body.logprobs:
        fields["logprobs"] = True
        fields["top_logprobs"] = body.top_logprobs or 0
    rf = response_format(body.format)
    if rf is not None:
        fields["response_format"] = rf
    if isinstance(body.think, bool):
        fields["chat_template_kwargs"] = {"enable_thinking": body.think}
    elif isinstance(body.think, str):
        fields["reasoning_effort"] = body.think
    return fields


def chat_request(body: ChatBody, sampling: Sampling, messages: list[dict]) -> ChatCompletionRequest:
    fields = _sampling_fields(body, sampling)
    if getattr(body, "tools", None) is not None:  # generate has none
        fields["tools"] = body.tools
    return ChatCompletionRequest.model_validate({"model": model_name(body.model), "messages": messages, **fields})


def generate_messages(body: GenerateBody) -> list[dict]:
    system = [{"role": "system", "content": body.system}] if body.system else []
    return [*system, {"role": "user", "content": body.prompt}]


def raw_request(body: GenerateBody, sampling: Sampling, ids: list[int], max_tokens: int) -> CompletionRequest:
    """A raw prompt's ids (with any `context` before them) as a completion of at most max_tokens."""
    fields = _sampling_fields(body, sampling)
    if fields.pop("logprobs", None):
        fields["logprobs"] = fields.pop("top_logprobs")
    fields["max_tokens"] = max_tokens
    return CompletionRequest.model_validate({"model": model_name(body.model), "prompt": ids, **fields})
