"""Prompt validation, the one place both the engine and the reference loop check a prompt and work out its
effective max_tokens."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import TinyLLMError


def prompt_ids_of(tok, prompt: str | Sequence[int]) -> list[int]:
    """Text (encoded with the tokenizer) or token ids -> a non-empty list of ids."""
    if isinstance(prompt, str):
        if not prompt:
            raise TinyLLMError("prompt is empty; expected at least one character or token id")
        return tok.encode(prompt)
    ids = [int(i) for i in prompt]
    if not ids:
        raise TinyLLMError("prompt is empty; expected at least one character or token id")
    return ids


def check_prompt(ids: list[int], vocab_size: int | None, max_len: int) -> None:
    """Every id in the vocabulary, and room in the context for at least one new token."""
    if vocab_size is not None and any(not 0 <= i < vocab_size for i in ids):
        bad = next(i for i in ids if not 0 <= i < vocab_size)
        raise TinyLLMError(f"prompt token id {bad} is out of range [0, {vocab_size})")
    if len(ids) >= max_len:
        raise TinyLLMError(
            f"prompt has {len(ids)} tokens, but the model's context length is {max_len} "
            f"(at most {max_len - 1} prompt tokens leave room for one new token)"
        )


def effective_max_tokens(
    prompt_len: int, max_tokens: int | None, max_len: int, pool_positions: int | None = None
) -> int:
    """A request's max_tokens as the engine holds it: the caller's max_tokens (None: no limit of its own) cut
    to the context's room and (in the engine) to what fits the whole KV pool alone (the last token is never
    fed back, hence + 1), so a request that outgrows the pool ends with "length" instead of being preempted
    forever."""
    fits = max_len - prompt_len  # generated token i sits at position prompt_len + i < max_len
    if pool_positions is not None:
        fits = min(fits, pool_positions - prompt_len + 1)
    return fits if max_tokens is None else min(fits, max_tokens)
