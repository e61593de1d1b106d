"""Embeddings (`LLM.embed`): each text encoded as a prompt is (BOS first only if the model adds one), checked
against the model's context, then its final hidden states pooled (model/pooling.py: mean or last token, after
the final norm, L2-normalized by default)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .errors import TinyLLMError
from .model.pooling import Pooling, embed_ids


def pooling_of(value: str | Pooling) -> Pooling:
    try:
        return Pooling(value)
    except ValueError:
        names = " or ".join(repr(p.value) for p in Pooling)
        raise TinyLLMError(f"pooling must be {names}, got {value!r}") from None


def input_ids(tokenizer, text_or_ids: str | Sequence[int], vocab_size: int, context_length: int) -> list[int]:
    """One input's token ids: non-empty, in the vocabulary, at most context_length of them."""
    if isinstance(text_or_ids, str):
        ids = tokenizer.encode(text_or_ids) if text_or_ids else []
    else:
        ids = [int(i) for i in text_or_ids]
    if not ids:
        raise TinyLLMError("an input to embed is empty; expected at least one character or token id")
    bad = next((i for i in ids if not 0 <= i < vocab_size), None)
    if bad is not None:
        raise TinyLLMError(f"token id {bad} is out of range [0, {vocab_size})")
    if len(ids) > context_length:
        raise TinyLLMError(f"an input has {len(ids)} tokens, more than the model's context length of {context_length}")
    return ids


def check_embeddable(llm) -> None:
    if getattr(llm, "tensor_parallel", None) is not None:
        raise TinyLLMError("embeddings run on one process; this LLM is split over several (tensor_parallel_size > 1)")
    if not hasattr(llm.model, "hidden_states"):
        raise TinyLLMError(f"{type(llm.model).__name__} does not give its hidden states, so it cannot embed")


def embed(
    llm, inputs: str | Sequence[int] | list, *, pooling: str | Pooling = "mean", normalize: bool = True
) -> torch.Tensor:
    """A text (or one list of ids) -> float32 [C]; a list of texts (or of id lists) -> [N, C]."""
    check_embeddable(llm)
    how = pooling_of(pooling)
    is_list = isinstance(inputs, list) and bool(inputs) and all(isinstance(x, (str, list, tuple)) for x in inputs)
    items = inputs if is_list else [inputs]
    c = llm.config
    ids = [input_ids(llm.tokenizer, x, c.vocab_size, c.context_length) for x in items]
    vectors = embed_ids(llm.model, ids, how, normalize)  # [N, C]
    return vectors if is_list else vectors[0]
