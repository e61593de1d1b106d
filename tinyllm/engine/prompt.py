"""Prompt validation, the one place both the engine and the reference loop check a prompt and work out its
effective max_tokens; `check_room` is the context rule the server, the CLI and Ollama's num_ctx use too."""

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


class NoRoom(TinyLLMError):
    """A prompt, or a prompt and its max_tokens, that the context cannot hold; `field` names the request field
    to blame (the prompt's, max_tokens', or the one that set the context)."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def check_room(
    prompt_len: int,
    context_len: int,
    field: str = "prompt",
    *,
    max_tokens: int | None = None,
    max_tokens_field: str = "max_tokens",
    context_field: str | None = None,
) -> None:
    """The context rule, for every surface: the prompt leaves room for one new token, and for max_tokens when
    it is given. field: what holds the prompt (prompt, messages, --max-tokens' prompt ...); max_tokens_field:
    what set max_tokens; context_field: what set context_len below the model's own (options.num_ctx), or None."""
    limit = "the model's context length" if context_field is None else context_field
    if prompt_len >= context_len:
        raise NoRoom(
            f"{field} has {prompt_len} tokens, but {limit} is {context_len} "
            f"(at most {context_len - 1} leave room for one new token)",
            context_field or field,
        )
    if max_tokens is not None and max_tokens > context_len:
        raise NoRoom(f"{max_tokens_field} is {max_tokens}, more than {limit} of {context_len} tokens", max_tokens_field)
    if max_tokens is not None and prompt_len + max_tokens > context_len:
        raise NoRoom(
            f"the prompt has {prompt_len} tokens and {max_tokens_field} is {max_tokens}, more than {limit} of "
            f"{context_len} tokens",
            max_tokens_field,
        )


def check_prompt(ids: list[int], vocab_size: int | None, max_len: int) -> None:
    """Every id in the vocabulary, and room in the context for at least one new token."""
    if vocab_size is not None and any(not 0 <= i < vocab_size for i in ids):
        bad = next(i for i in ids if not 0 <= i < vocab_size)
        raise TinyLLMError(f"prompt token id {bad} is out of range [0, {vocab_size})")
    check_room(len(ids), max_len)


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
