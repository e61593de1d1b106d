"""Prompts before tokenizing (server/checks/prompts.py): the four shapes of a completions prompt, their counts
and sizes, and chat messages as the template gets them."""

import pytest

from tinyllm.errors import TinyLLMError
from tinyllm.server.checks.admission import CONTEXT_CODE, PromptLimits
from tinyllm.server.checks.prompts import (
    chat_prompt,
    chat_prompt_ids,
    check_prompts,
    completion_prompt_ids,
    encode_text,
    split_prompts,
)
from tinyllm.server.wire.errors import APIError
from tinyllm.server.wire.protocol import ChatMessage
from tinyllm.text.chat_prompt import ChatPrompt

LIMITS = PromptLimits(context_length=10, max_token_chars=3)


class Template:
    """Records what the template is given; renders each message as role:content."""

    def __init__(self, fail: Exception | None = None):
        self.fail, self.seen = fail, None

    def apply_chat_template(self, messages, add_generation_prompt, tools):
        if self.fail is not None:
            raise self.fail
        self.seen = (messages, add_generation_prompt, tools)
        return "|".join(f"{m['role']}:{m['content']}" for m in messages)

    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text] + ([1] if add_special_tokens else [])

    def encode_chat(self, messages, add_generation_prompt, tools, variables=None):
        text = self.apply_chat_template(messages, add_generation_prompt, tools)
        return ChatPrompt(text, [ord(c) for c in text])


def chat_prompt_text(tokenizer, messages, add_generation_prompt=True, tools=None) -> str:
    return chat_prompt(tokenizer, messages, add_generation_prompt, tools).text


def refused(call, *args) -> APIError:
    with pytest.raises(APIError) as err:
        call(*args)
    assert err.value.status == 400
    return err.value


def test_the_four_shapes_of_a_completions_prompt():
    assert split_prompts("text") == ["text"]
    assert split_prompts(["a", "b"]) == ["a", "b"]
    assert split_prompts([1, 2, 3]) == [[1, 2, 3]]
    assert split_prompts([[1, 2], [3]]) == [[1, 2], [3]]
    assert split_prompts([]) == []


def test_prompt_counts_and_sizes():
    err = refused(check_prompts, [], 1, LIMITS)
    assert err.param == "prompt" and err.message == "prompt is empty; expected text, token ids, or a list of them"
    check_prompts(["x"] * 32, 2, LIMITS)  # 64 sequences: the most one request may ask for
    err = refused(check_prompts, ["x"] * 33, 2, LIMITS)
    assert err.param == "prompt"
    assert err.message == "33 prompts x n=2 is 66 sequences, more than the 64 one request may ask for"
    err = refused(check_prompts, ["x", ""], 1, LIMITS)
    assert err.message == "prompt is empty; expected at least one character or token id"
    assert refused(check_prompts, [[1], []], 1, LIMITS).param == "prompt"
    check_prompts(["x" * 30, list(range(9))], 1, LIMITS)
    err = refused(check_prompts, ["x", "x" * 31], 1, LIMITS)
    assert (err.param, err.code) == ("prompt", CONTEXT_CODE)
    assert err.message == (
        "prompt has 31 characters, more than any prompt within the context length of 10 tokens can have (30)"
    )
    err = refused(check_prompts, [[1], list(range(10))], 1, LIMITS)
    assert (err.param, err.code) == ("prompt", CONTEXT_CODE)
    assert err.message == (
        "prompt has 10 tokens, but the model's context length is 10 (at most 9 leave room for one new token)"
    )


def test_completion_prompt_ids_encode_text_with_special_tokens_and_keep_ids():
    assert completion_prompt_ids(Template(), ["ab", [5, 6]]) == [[97, 98, 1], [5, 6]]
    assert completion_prompt_ids(Template(), ["\ud800"]) == [[0xFFFD, 1]]  # a lone surrogate cannot be encoded
    assert encode_text(Template(), "a\ud800", add_special_tokens=False) == [97, 0xFFFD]
    assert encode_text(Template(), "a") == [97, 1]


def test_messages_reach_the_template_as_plain_text_with_their_tool_fields():
    tok = Template()
    messages = [
        ChatMessage(role="system", content="be brief"),
        ChatMessage(role="user", content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
        ChatMessage(role="assistant", content=None, tool_calls=[{"id": "c1"}]),
        ChatMessage(role="tool", content="sunny", tool_call_id="c1"),
    ]
    assert chat_prompt_text(tok, messages, False, [{"t": 1}]) == "system:be brief|user:ab|assistant:|tool:sunny"
    plain, add_generation_prompt, tools = tok.seen
    assert plain[2] == {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]}
    assert plain[3] == {"role": "tool", "content": "sunny", "tool_call_id": "c1"}
    assert set(plain[0]) == {"role", "content"} and add_generation_prompt is False and tools == [{"t": 1}]
    assert chat_prompt_ids(tok, messages[:1]) == [ord(c) for c in "system:be brief"]  # no second BOS
    assert tok.seen[1] is True
    chat_prompt(tok, messages[:1])
    assert tok.seen[1] is True  # a generation prompt unless asked otherwise


def test_bad_messages_are_a_400_naming_messages():
    err = refused(chat_prompt_text, Template(), [ChatMessage(role="user", content=None)])
    assert err.param == "messages" and err.message == "messages[0].content is missing; a 'user' message needs its text"
    image = ChatMessage(role="user", content=[{"type": "text", "text": "a"}, {"type": "image_url"}])
    err = refused(chat_prompt_text, Template(), [ChatMessage(role="system", content="s"), image])
    assert err.param == "messages"
    assert err.message == "messages[1].content has a 'image_url' part; only text parts are supported"
    for part, kind in (({"type": "image_url", "text": "a"}, "image_url"), ({"type": "text"}, "text")):
        err = refused(chat_prompt_text, Template(), [ChatMessage(role="user", content=[part])])
        assert (err.param, err.message) == (
            "messages",
            f"messages[0].content has a {kind!r} part; only text parts are supported",
        )
    err = refused(chat_prompt_text, Template(TinyLLMError("roles must alternate")), [])
    assert err.param == "messages" and err.message == "roles must alternate"
    err = refused(chat_prompt_text, Template(KeyError("x")), [])
    assert err.param == "messages" and err.message == "the chat template failed on these messages (KeyError: 'x')"
