"""The HTTP API's request and response bodies, in OpenAI's shapes (plus /tokenize and /detokenize).

Requests are strict (a string where a number belongs is a 400, not a silent conversion). Generation
requests and chat messages keep their undeclared fields, so that unsupported.py can refuse those that
ask for something this server does not do; other unknown extras are ignored. The sampling fields
that set a SamplingParams field as they are come from its field table (sampling/params.py), and their
ranges are checked by SamplingParams, so the rules live in one place; every field is optional and
nullable, since clients send `null` for "not set".
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_serializer

from ... import __version__
from ...sampling.params import FIELDS, names_on
from .limits import MAX_N, MAX_TOP_LOGPROBS

# Names the code that produced an answer; OpenAI's clients read it from every response and chunk.
SYSTEM_FINGERPRINT = f"tinyllm-{__version__}"


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class _OpenBody(_Body):
    model_config = ConfigDict(strict=True, extra="allow")  # extras kept for unsupported.py to judge


class StreamOptions(_Body):
    include_usage: bool | None = None


class ContentPart(_Body):
    type: str
    text: str | None = None


class ChatMessage(_OpenBody):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None


# a field rule's kind -> the JSON value a request sends for it
_WIRE_TYPES = {"number": float, "integer": int, "bool": bool, "ids": list[int], "strings": str | list[str]}


def _sampling_fields() -> dict:
    """The request fields that set a SamplingParams field as they are, from its field table."""
    return {wire: (_WIRE_TYPES[FIELDS[name].rule.kind] | None, None) for name, wire in names_on("openai").items()}


# temperature, top_p, top_k, min_p, typical_p (llama.cpp's), tfs_z (Ollama's), mirostat and its tau and eta
# (llama.cpp's), the three penalties, stop_token_ids, ignore_eos (vLLM's), ...
_SamplingRequest = create_model("_SamplingRequest", __base__=_OpenBody, **_sampling_fields())


class _GenerationRequest(_SamplingRequest):
    """The fields that SamplingParams' table leaves to the routes (server/checks/sampling_params.py)."""

    model: str | None = None
    max_tokens: int | None = None
    min_tokens: int | None = None  # vLLM's: no stop (EOS, stop ids or strings) before this many tokens
    repeat_last_n: int | None = None  # llama.cpp's: the penalties look at the last n tokens (-1: all of them)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=MAX_N)
    user: str | None = None
    logit_bias: dict[str, float] | None = None  # token id (a JSON key, so a string) -> bias in [-100, 100]


class ChatCompletionRequest(_GenerationRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)


class CompletionRequest(_GenerationRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool | None = None  # the prompt comes back before the completion (with its logprobs if asked)
    prompt_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)  # not OpenAI's: vLLM's extra field


class ResponsesRequest(_OpenBody):
    """POST /v1/responses: the fields honoured; every other one is judged by responses.py."""

    model: str | None = None
    input: str | list[dict]
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool | None = None


class TokenizeRequest(_Body):
    """One of prompt or messages (checked by the route, which can say which was missing)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    tools: list[Any] | None = None  # with messages: rendered as a chat request renders them (checked by tools.py)
    tool_choice: Any = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool | None = None


class DetokenizeRequest(_Body):
    model: str | None = None
    tokens: list[int]


# ---- responses ---------------------------------------------------------------------------------


def _now() -> int:
    return int(time.time())


EmbeddingInputs = str | list[str] | list[int] | list[list[int]]


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    model: str | None = None
    input: EmbeddingInputs
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = None
    user: str | None = None
    pooling: str | None = None  # not OpenAI's: "mean" (default) or "last"
    normalize: bool | None = None  # not OpenAI's: L2-normalize each vector (default true)


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int = 0  # of completion_tokens, those inside the think span


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)
    completion_tokens_details: CompletionTokensDetails | None = None  # a reasoning model's answers only


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob] = Field(default_factory=list)


class CompletionLogprobs(BaseModel):
    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)  # None: an echoed prompt's first token
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class FunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text of an object, as OpenAI's


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


def _set_only(model: BaseModel) -> dict:
    # OpenAI's deltas carry only what changed: no "role": null in every chunk.
    return {k: getattr(model, k) for k in type(model).model_fields if getattr(model, k) is not None}


class FunctionDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None

    @model_serializer
    def _set_fields_only(self) -> dict:
        return _set_only(self)


class ToolCallDelta(BaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionDelta

    @model_serializer
    def _set_fields_only(self) -> dict:
        return _set_only(self)


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = None  # null, as OpenAI's, when the answer calls no tool
    reasoning_content: str | None = None  # vLLM's field: a reasoning model's thinking, apart from the answer

    @model_serializer
    def _without_reasoning_unless_set(self) -> dict:
        # a model that does not reason answers exactly as before: no reasoning_content key
        shown = {k: getattr(self, k) for k in type(self).model_fields}
        return {k: v for k, v in shown.items() if k != "reasoning_content" or v is not None}


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class _Response(BaseModel):
    id: str
    created: int = Field(default_factory=_now)
    model: str
    seed: int  # not in OpenAI's schema: sending it back reproduces the answer (see docs of `seed`)
    system_fingerprint: str = SYSTEM_FINGERPRINT


class ChatCompletionResponse(_Response):
    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatChoice]
    usage: Usage


class Delta(BaseModel):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None

    @model_serializer
    def _set_fields_only(self) -> dict:
        return _set_only(self)


class ChatStreamChoice(BaseModel):
    index: int
    delta: Delta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(_Response):
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChatStreamChoice]
    usage: Usage | None = None


class PromptTokenLogprob(BaseModel):
    logprob: float
    decoded_token: str


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    # Only with the prompt_logprobs extra (as vLLM): per prompt token, None for the first, else token id -> logprob.
    prompt_logprobs: list[dict[str, PromptTokenLogprob] | None] | None = None


class CompletionResponse(_Response):
    object: Literal["text_completion"] = "text_completion"
    choices: list[CompletionChoice]
    usage: Usage


class CompletionChunk(_Response):
    object: Literal["text_completion"] = "text_completion"
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=_now)
    owned_by: str = "tinyllm"
    max_model_len: int | None = None  # None: not loaded yet, and its file did not say


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeResponse(BaseModel):
    tokens: list[int]
    count: int
    max_model_len: int


class DetokenizeResponse(BaseModel):
    prompt: str
