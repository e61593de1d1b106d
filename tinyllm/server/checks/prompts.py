"""Prompts of API requests turned into token ids: chat messages through the model's template, and the
four shapes of a completions prompt (text, texts, ids, lists of ids)."""

from __future__ import annotations

from ...errors import TinyLLMError
from ...text.chat_prompt import ChatPrompt
from ..wire.errors import bad_request
from ..wire.limits import MAX_PROMPTS
from ..wire.protocol import ChatMessage
from .admission import PromptLimits, replace_lone_surrogates

# OpenAI's tool-calling fields of a message, checked by the template, and an assistant's earlier reasoning
_TOOL_FIELDS = ("tool_calls", "tool_call_id", "reasoning_content")


def _plain_messages(messages: list[ChatMessage]) -> list[dict]:
    """{"role", "content": str} dicts for the template (with an assistant's tool_calls and a tool message's
    tool_call_id when sent); text content parts are joined in order. Only an assistant message may leave its
    content out (null or absent), as OpenAI's API allows."""
    plain = []
    for i, m in enumerate(messages):
        content = m.content
        if content is None and m.role != "assistant":  # an assistant's turn may be tool calls alone
            raise bad_request(f"messages[{i}].content is missing; a {m.role!r} message needs its text", "messages")
        if isinstance(content, list):
            bad = next((p for p in content if p.type != "text" or p.text is None), None)
            if bad is not None:
                raise bad_request(
                    f"messages[{i}].content has a {bad.type!r} part; only text parts are supported", "messages"
                )
            content = "".join(p.text for p in content)
        message = {"role": m.role, "content": content or ""}
        for name in _TOOL_FIELDS:
            if (m.model_extra or {}).get(name) is not None:
                message[name] = m.model_extra[name]
        plain.append(message)
    return plain


def chat_prompt(
    tokenizer,
    messages: list[ChatMessage],
    add_generation_prompt: bool = True,
    tools: list[dict] | None = None,
    variables: dict | None = None,
) -> ChatPrompt:
    """The conversation rendered with the model's template and encoded; text in the messages and tools stays
    text even where it spells a control token, so only the template writes turns. Lone surrogates (which no
    encoding holds) become U+FFFD first."""
    plain = _clean_strings(_plain_messages(messages))
    try:
        return tokenizer.encode_chat(plain, add_generation_prompt, _clean_strings(tools), variables)
    except TinyLLMError as exc:
        raise bad_request(str(exc), "messages") from None
    except Exception as exc:  # a template may fail in its own ways on messages it does not expect
        raise bad_request(
            f"the chat template failed on these messages ({type(exc).__name__}: {exc})", "messages"
        ) from None


def _clean_strings(value):
    if isinstance(value, str):
        return replace_lone_surrogates(value)
    if isinstance(value, dict):
        return {_clean_strings(k): _clean_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_strings(v) for v in value]
    return value


def encode_text(tokenizer, text: str, add_special_tokens: bool = True) -> list[int]:
    """Token ids of request text; lone surrogates (which no encoding holds) become U+FFFD first."""
    return tokenizer.encode(replace_lone_surrogates(text), add_special_tokens=add_special_tokens)


def chat_prompt_ids(
    tokenizer, messages: list[ChatMessage], tools: list[dict] | None = None, variables: dict | None = None
) -> list[int]:
    # The template writes any BOS itself: none is added.
    return chat_prompt(tokenizer, messages, True, tools, variables).ids


def split_prompts(prompt) -> list:
    """The prompts of a completions request: text, ids, or a list of either."""
    if isinstance(prompt, str):
        return [prompt]
    if prompt and isinstance(prompt[0], int):  # the schema allows only lists of one kind
        return [prompt]
    return list(prompt)


def check_prompts(prompts: list, n: int, limits: PromptLimits) -> None:
    """Everything that can be refused without tokenizing: counts, sizes against the context."""
    if not prompts:
        raise bad_request("prompt is empty; expected text, token ids, or a list of them", "prompt")
    if len(prompts) * n > MAX_PROMPTS:
        raise bad_request(
            f"{len(prompts)} prompts x n={n} is {len(prompts) * n} sequences, more than the "
            f"{MAX_PROMPTS} one request may ask for",
            "prompt",
        )
    for p in prompts:
        if not p:
            raise bad_request("prompt is empty; expected at least one character or token id", "prompt")
        if isinstance(p, str):
            limits.check_text(len(p), "prompt")
        else:
            limits.check_ids(len(p), "prompt")


def completion_prompt_ids(tokenizer, prompts: list) -> list[list[int]]:
    """One id list per prompt (checked first with check_prompts). Ids are checked against the vocabulary
    by the engine."""
    return [encode_text(tokenizer, p) if isinstance(p, str) else list(p) for p in prompts]
