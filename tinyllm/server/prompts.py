"""Prompts of API requests turned into token ids: chat messages through the model's template, and the
four shapes of a completions prompt (text, texts, ids, lists of ids)."""
from __future__ import annotations

from ..errors import TinyLLMError
from .errors import bad_request
from .protocol import ChatMessage

MAX_PROMPTS = 64  # prompts x n choices in one completions request: all of them join the batch at once


def _plain_messages(messages: list[ChatMessage]) -> list[dict]:
    """{"role", "content": str} dicts for the template; text content parts are joined in order."""
    plain = []
    for i, m in enumerate(messages):
        content = m.content
        if isinstance(content, list):
            bad = next((p for p in content if p.type != "text" or p.text is None), None)
            if bad is not None:
                raise bad_request(f"messages[{i}].content has a {bad.type!r} part; only text parts "
                                  f"are supported", "messages")
            content = "".join(p.text for p in content)
        plain.append({"role": m.role, "content": content or ""})
    return plain


def chat_prompt_text(tokenizer, messages: list[ChatMessage], add_generation_prompt: bool = True) -> str:
    plain = _plain_messages(messages)
    try:
        return tokenizer.apply_chat_template(plain, add_generation_prompt)
    except TinyLLMError as exc:
        raise bad_request(str(exc), "messages") from None
    except Exception as exc:  # a template may fail in its own ways on messages it does not expect
        raise bad_request(f"the chat template failed on these messages ({type(exc).__name__}: {exc})",
                          "messages") from None


def chat_prompt_ids(tokenizer, messages: list[ChatMessage]) -> list[int]:
    # The template writes any BOS itself: encoding must not add a second one.
    return tokenizer.encode(chat_prompt_text(tokenizer, messages), add_special_tokens=False)


def completion_prompt_ids(tokenizer, prompt, n: int) -> list[list[int]]:
    """One id list per prompt. Ids are checked against the vocabulary by the engine."""
    if isinstance(prompt, str):
        prompts = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        prompts = [list(prompt)]
    else:
        prompts = list(prompt)
    if not prompts:
        raise bad_request("prompt is empty; expected text, token ids, or a list of them", "prompt")
    if len(prompts) * n > MAX_PROMPTS:
        raise bad_request(f"{len(prompts)} prompts x n={n} is {len(prompts) * n} sequences, more than the "
                          f"{MAX_PROMPTS} one request may ask for", "prompt")
    out = []
    for p in prompts:
        if isinstance(p, str) and not p:
            raise bad_request("prompt is empty; expected at least one character or token id", "prompt")
        out.append(tokenizer.encode(p) if isinstance(p, str) else list(p))
    return out
