"""Cheap checks before a request costs anything (server/checks/admission.py): each limit at its edge and one past,
the 400 naming the field with the context-length code, lone surrogates and stop-string caps."""

import json

import pytest

from tinyllm.server.checks.admission import (
    CONTEXT_CODE,
    PromptLimits,
    check_stops,
    context_error,
    max_token_chars,
    replace_lone_surrogates,
)
from tinyllm.server.wire.errors import APIError
from tinyllm.server.wire.protocol import ChatMessage

LIMITS = PromptLimits(context_length=10, max_token_chars=3)  # at most 30 characters, 9 prompt ids


def refused(call, *args) -> APIError:
    with pytest.raises(APIError) as err:
        call(*args)
    assert err.value.status == 400
    return err.value


def test_context_error_is_a_400_naming_the_field_with_the_context_code():
    err = context_error("too long", "prompt")
    assert (err.status, err.message, err.param, err.code) == (400, "too long", "prompt", CONTEXT_CODE)
    assert CONTEXT_CODE == "context_length_exceeded"  # the code OpenAI's clients look for


def test_text_and_ids_at_the_limit_pass_and_one_more_is_refused():
    assert LIMITS.max_chars == 30
    LIMITS.check_text(30, "prompt")
    err = refused(LIMITS.check_text, 31, "prompt")
    assert err.param == "prompt" and err.code == CONTEXT_CODE
    assert err.message == (
        "prompt has 31 characters, more than any prompt within the context length of 10 tokens can have (30)"
    )
    LIMITS.check_ids(9, "input")
    err = refused(LIMITS.check_ids, 10, "input")
    assert err.param == "input" and err.code == CONTEXT_CODE
    assert err.message == (
        "input has 10 tokens, but the model's context length is 10 (at most 9 leave room for one new token)"
    )


def test_message_count_and_characters_against_the_context():
    LIMITS.check_message_count(10)
    err = refused(LIMITS.check_message_count, 11)
    assert err.param == "messages"
    assert err.message == "messages has 11 entries, more than the context length of 10 tokens can hold"
    LIMITS.check_messages([ChatMessage(role="user", content="x" * 30)])
    parts = [{"type": "text", "text": "x" * 20}, {"type": "text", "text": "y" * 11}]
    err = refused(LIMITS.check_messages, [ChatMessage(role="user", content=parts)])
    assert err.param == "messages" and "31 characters" in err.message
    calls = [{"id": "c", "function": {"name": "f"}}]  # an assistant's tool calls count as their JSON text
    LIMITS.check_messages([ChatMessage(role="assistant", content=None)])
    err = refused(LIMITS.check_messages, [ChatMessage(role="assistant", content="x" * 10, tool_calls=calls)])
    assert err.message.startswith("messages has 50 characters")  # 10 of text, 40 of the calls' JSON


def test_tools_count_with_the_messages_and_the_error_names_the_bigger_side():
    tools = [{"f": "x"}]  # 12 characters of JSON: [{"f": "x"}]
    LIMITS.check_messages([ChatMessage(role="user", content="x" * 18)], tools)
    err = refused(LIMITS.check_messages, [ChatMessage(role="user", content="x" * 19)], tools)
    assert err.param == "tools" and err.code == CONTEXT_CODE
    assert err.message.startswith("messages and tools have 31 characters together (12 of them the tools' JSON)")
    err = refused(LIMITS.check_messages, [ChatMessage(role="user", content="x" * 31)], tools)
    assert err.param == "messages"
    err = refused(LIMITS.check_messages, [ChatMessage(role="user", content="x" * 30)], tools)
    assert err.param == "tools"  # the messages alone fit: the tools are what does not


def test_an_assistant_turn_of_tool_calls_alone_counts_only_the_calls():
    calls = [{"id": "c" * 18}]
    assert len(json.dumps(calls)) == 30
    LIMITS.check_messages([ChatMessage(role="assistant", content=None, tool_calls=calls)])
    err = refused(LIMITS.check_messages, [ChatMessage(role="assistant", content="x", tool_calls=calls)])
    assert err.message.startswith("messages has 31 characters")


def test_room_for_the_answer_names_the_field_that_asked_for_it():
    LIMITS.check_room(4, 6, "prompt")
    LIMITS.check_room(9, None, "prompt")
    err = refused(LIMITS.check_room, 4, 7, "prompt", "max_completion_tokens")
    assert err.param == "max_completion_tokens" and err.code == CONTEXT_CODE
    assert err.message == (
        "the prompt has 4 tokens and max_completion_tokens is 7, more than the model's context length of 10 tokens"
    )
    assert refused(LIMITS.check_room, 4, 7, "prompt").param == "max_tokens"
    assert refused(LIMITS.check_room, 10, None, "prompt").param == "prompt"
    err = refused(LIMITS.check_room, 1, 11, "prompt")  # more than the whole context, whatever the prompt
    assert (err.param, err.message) == (
        "max_tokens",
        "max_tokens is 11, more than the model's context length of 10 tokens",
    )


def test_lone_surrogates_become_the_replacement_character_and_pairs_their_character():
    assert replace_lone_surrogates("plain é") == "plain é"
    assert replace_lone_surrogates("a\ud800b") == "a\ufffdb"
    assert replace_lone_surrogates("\ud83d\ude00\udc00") == "😀\ufffd"


def test_stop_strings_within_their_caps():
    assert check_stops("x") == ("x",)
    assert check_stops(None) == ()
    assert check_stops(["a", "b\ud800"]) == ("a", "b\ufffd")
    assert len(check_stops(["s"] * 16)) == 16
    err = refused(check_stops, ["s"] * 17)
    assert err.param == "stop" and err.message == "stop has 17 strings, more than the limit of 16"
    assert check_stops(["x" * 1024]) == ("x" * 1024,)
    err = refused(check_stops, ["ok", "x" * 1025])
    assert err.param == "stop" and err.message == "a stop string has 1025 characters, more than the limit of 1024"


def test_max_token_chars_is_the_longest_vocabulary_entry():
    class HF:
        def get_vocab(self, with_added_tokens):
            assert with_added_tokens
            return {"a": 0, "abcd": 1, "<|special|>": 2}

    class Tokenizer:
        hf = HF()

    assert max_token_chars(Tokenizer()) == 11
    assert max_token_chars(object()) == 64  # no vocabulary to read: a safe bound
