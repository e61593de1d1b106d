"""An embedding request (/v1/embeddings, Ollama's /api/embed) into the queue's terms: its inputs split and counted,
each input's ids checked against the vocabulary and the context, their total against one request's bound, the
pooling extras and `dimensions`."""

from __future__ import annotations

from ...embedding import pooling_of
from ...errors import TinyLLMError
from ...model.pooling import Pooling
from ..wire.errors import bad_request
from ..wire.protocol import EmbeddingInputs
from .admission import PromptLimits, context_error
from .prompts import encode_text

MAX_INPUTS = 2048  # inputs in one request, as OpenAI's API allows
PROMPT_PARAM = "input"


def split_inputs(value: EmbeddingInputs, param: str = PROMPT_PARAM) -> list:
    """The inputs of a request (text, texts, ids, lists of ids), at least one and at most MAX_INPUTS."""
    items = [value] if isinstance(value, str) or (value and isinstance(value[0], int)) else list(value)
    if not items:
        raise bad_request(f"{param} is an empty list; expected text, token ids, or a list of them", param)
    if len(items) > MAX_INPUTS:
        raise bad_request(f"{param} has {len(items)} inputs, more than the limit of {MAX_INPUTS}", param)
    return items


def input_counts(limits: PromptLimits, param: str = PROMPT_PARAM):
    """The body's check before validation: the input count, and each id list against the context."""

    def check(data: dict) -> None:
        value = data.get(param)
        if not isinstance(value, list) or not value:
            return
        lists = [value] if isinstance(value[0], int) else [v for v in value if isinstance(v, list)]
        if len(value) > MAX_INPUTS and len(lists) != 1:
            raise bad_request(f"{param} has {len(value)} inputs, more than the limit of {MAX_INPUTS}", param)
        for i, ids in enumerate(lists):
            _check_length(len(ids), limits.context_length, f"{param}[{i}]" if ids is not value else param, param)

    return check


def _check_length(num_ids: int, context: int, where: str, param: str) -> None:
    if num_ids > context:
        raise context_error(f"{where} has {num_ids} tokens, more than the model's context length of {context}", param)


def embedding_ids(
    tokenizer, vocab: int, context: int, items: list, param: str, truncate: bool, max_tokens: int
) -> list[list[int]]:
    """Each input's ids, checked against the vocabulary and the context (or cut to it when truncate) and their total
    against max_tokens; `context` is the request's own, at most the model's."""
    out = []
    for i, item in enumerate(items):
        if not item:
            raise bad_request(f"{param}[{i}] is empty; expected at least one character or token id", param)
        ids = encode_text(tokenizer, item) if isinstance(item, str) else item
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise bad_request(f"{param}[{i}] has token id {bad}, outside the vocabulary [0, {vocab})", param)
        if not truncate:
            _check_length(len(ids), context, f"{param}[{i}]", param)
        out.append(ids[:context])
    total = sum(len(ids) for ids in out)
    if total > max_tokens:
        raise bad_request(
            f"{param} has {total} tokens together, more than the limit of {max_tokens} for one request", param
        )
    return out


def pooling_options(pooling: str | None, normalize: bool | None) -> tuple[Pooling, bool]:
    try:
        how = pooling_of(pooling or Pooling.MEAN.value)
    except TinyLLMError as exc:
        raise bad_request(str(exc), "pooling") from None
    return how, normalize is not False


def check_dimensions(dimensions: int | None, width: int, param: str = "dimensions") -> None:
    """Only the model's own width: a vector is never cut or padded."""
    if dimensions is not None and dimensions != width:
        raise bad_request(
            f"{param} {dimensions} is not supported: this model's embeddings have {width} dimensions; "
            f"send {width} or leave {param} out",
            param,
        )
