"""What /v1/completions returns about the prompt itself: `echo` (the prompt's text, and with `logprobs` its
tokens' logprobs before the completion's, the first token's null as OpenAI's API had it) and vLLM's
`prompt_logprobs` extra (per prompt token: null for the first, else token id -> logprob and text)."""

from __future__ import annotations

from dataclasses import replace

from ..wire.logprobs import TokenTexts, completion_logprobs
from ..wire.protocol import CompletionLogprobs, PromptTokenLogprob


def echo_text(tokenizer, prompt) -> str:
    """The prompt as text: as sent, or decoded when it was sent as token ids."""
    return prompt if isinstance(prompt, str) else tokenizer.decode(list(prompt))


def prompt_part(
    texts: TokenTexts, prompt_ids: list[int], prompt_lps: list, top_n: int
) -> tuple[CompletionLogprobs, int]:
    """The prompt's tokens in OpenAI's completions format, and the text offset where the completion's begin."""
    first = texts.get(prompt_ids[0])[0]
    out = CompletionLogprobs(tokens=[first], token_logprobs=[None], top_logprobs=[None], text_offset=[0])
    scored = [replace(lp, top=lp.top[:top_n]) for lp in prompt_lps[1:]]
    rest, offset = completion_logprobs(texts, scored, len(first))
    return _joined(out, rest), offset


def _joined(out: CompletionLogprobs, part: CompletionLogprobs) -> CompletionLogprobs:
    out.tokens += part.tokens
    out.token_logprobs += part.token_logprobs
    out.top_logprobs += part.top_logprobs
    out.text_offset += part.text_offset
    return out


def echo_logprobs(
    texts: TokenTexts, prompt_ids: list[int], prompt_lps: list, completion_lps: list, top_n: int
) -> CompletionLogprobs:
    """The prompt's tokens then the completion's, in OpenAI's completions format."""
    out, offset = prompt_part(texts, prompt_ids, prompt_lps, top_n)
    return _joined(out, completion_logprobs(texts, completion_lps, offset)[0])


def prompt_logprobs_field(texts: TokenTexts, prompt_lps: list, top_n: int) -> list:
    """vLLM's shape: None for the first token, then {token id: {logprob, decoded_token}} holding the prompt's
    own token and the top_n most likely ones."""
    out: list = [None]
    for lp in prompt_lps[1:]:
        entries = [(lp.token, lp.logprob), *lp.top[:top_n]]
        out.append({str(i): PromptTokenLogprob(logprob=v, decoded_token=texts.get(i)[0]) for i, v in entries})
    return out
