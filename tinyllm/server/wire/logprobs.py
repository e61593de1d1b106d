"""Token logprobs in OpenAI's two formats: chat (`content: [{token, logprob, bytes, top_logprobs}]`)
and legacy completions (`tokens`, `token_logprobs`, `top_logprobs: [{token: logprob}]`, `text_offset`).
"""

from __future__ import annotations

import math

from .protocol import ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob

# JSON has no -Infinity; an alternative that a filter (top-k, top-p, ...) removed has probability 0,
# and is reported with this floor instead.
LOGPROB_FLOOR = -9999.0


def _finite(x: float) -> float:
    return x if math.isfinite(x) else LOGPROB_FLOOR


def _byte_level_decoder() -> dict[str, int]:
    """The inverse of byte-level BPE's byte -> printable character table: printable bytes stand for
    themselves, the others were moved to code points from 256 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


class TokenTexts:
    """A token's text and raw bytes (a token may hold part of a UTF-8 character: its text then shows
    U+FFFD, but its bytes are exact, so a client can join bytes into the true text)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        byte_level = str(getattr(tokenizer, "kind", "")).startswith("byte-level")
        self._decoder = _byte_level_decoder() if byte_level else None
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def get(self, token_id: int) -> tuple[str, list[int]]:
        hit = self._cache.get(token_id)
        if hit is None:
            text = self.tokenizer.token_text(token_id)
            hit = self._cache[token_id] = (text, self._bytes(token_id, text))
        return hit

    def _bytes(self, token_id: int, text: str) -> list[int]:
        raw = getattr(self.tokenizer, "token_bytes", lambda _: None)(token_id)
        if raw is not None:  # a SentencePiece piece, byte pieces included
            return list(raw)
        hf = getattr(self.tokenizer, "hf", None)
        piece = hf.id_to_token(token_id) if (self._decoder is not None and hf is not None) else None
        if piece is not None and all(c in self._decoder for c in piece):
            return [self._decoder[c] for c in piece]
        return list(text.encode("utf-8"))


def _top_with_sampled(lp, always: bool = False) -> list[tuple[int, float]]:
    """The top alternatives, plus the sampled token when it is not among them (as vLLM reports it), so a
    client always finds the chosen token in top_logprobs; with no alternatives asked for, the sampled token
    alone only when `always` (legacy completions' logprobs=0, as OpenAI's), else none (chat's top_logprobs=0)."""
    top = list(lp.top)
    if (top or always) and all(i != lp.token for i, _ in top):
        top.append((lp.token, lp.logprob))
    return top


def chat_logprobs(texts: TokenTexts, logprobs: list) -> ChatLogprobs:
    content = []
    for lp in logprobs:
        text, raw = texts.get(lp.token)
        top = [
            TopLogprob(token=texts.get(i)[0], logprob=_finite(v), bytes=texts.get(i)[1])
            for i, v in _top_with_sampled(lp)
        ]
        content.append(ChatTokenLogprob(token=text, logprob=_finite(lp.logprob), bytes=raw, top_logprobs=top))
    return ChatLogprobs(content=content)


def completion_logprobs(texts: TokenTexts, logprobs: list, offset: int) -> tuple[CompletionLogprobs, int]:
    """The block for these tokens, and the text offset after them (streamed chunks continue from it)."""
    out = CompletionLogprobs()
    for lp in logprobs:
        text = texts.get(lp.token)[0]
        out.tokens.append(text)
        out.token_logprobs.append(_finite(lp.logprob))
        out.top_logprobs.append({texts.get(i)[0]: _finite(v) for i, v in _top_with_sampled(lp, always=True)})
        out.text_offset.append(offset)
        offset += len(text)
    return out, offset
