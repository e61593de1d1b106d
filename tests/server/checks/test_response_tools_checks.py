"""/v1/responses' function tools in the chat's shape (server/checks/response_tools.py), checked without a server:
flat and nested tools, the flat tool_choice, parallel_tool_calls kept even when false, function_call and
function_call_output items as the chat's messages, and each malformed one a 400 with its literal message and field."""

import pytest

from tinyllm.server.checks.response_tools import call_message, chat_tool_fields, output_message
from tinyllm.server.wire.errors import APIError

CITY = {"type": "object", "properties": {"city": {"type": "string"}}}


def refused(call, *args) -> APIError:
    with pytest.raises(APIError) as err:
        call(*args)
    assert err.value.status == 400
    return err.value


def test_no_tools_is_an_empty_list_and_nothing_else():
    assert chat_tool_fields({}) == {"tools": []}
    assert chat_tool_fields({"tools": None, "tool_choice": None, "parallel_tool_calls": None}) == {"tools": []}


def test_flat_tools_become_the_chats_nested_ones_with_only_their_function_keys():
    flat = {"type": "function", "name": "w", "description": "Weather.", "parameters": CITY, "strict": True, "x": 1}
    bare = {"type": "function", "name": "t", "description": None, "parameters": None}
    nested = {"type": "function", "function": {"name": "n", "parameters": CITY}}
    got = chat_tool_fields({"tools": [flat, bare, nested], "tool_choice": "required", "parallel_tool_calls": False})
    assert got == {
        "tools": [
            {
                "type": "function",
                "function": {"name": "w", "description": "Weather.", "parameters": CITY, "strict": True},
            },
            {"type": "function", "function": {"name": "t"}},
            {"type": "function", "function": {"name": "n", "parameters": CITY}},
        ],
        "tool_choice": "required",
        "parallel_tool_calls": False,
    }
    assert chat_tool_fields({"parallel_tool_calls": True}) == {"tools": [], "parallel_tool_calls": True}


@pytest.mark.parametrize(
    ("choice", "chat"),
    [
        ({"type": "function", "name": "w"}, {"type": "function", "function": {"name": "w"}}),
        ({"type": "function"}, {"type": "function", "function": {"name": None}}),
        ({"type": "function", "function": {"name": "w"}}, {"type": "function", "function": {"name": "w"}}),
        ({"type": "allowed_tools", "name": "w"}, {"type": "allowed_tools", "name": "w"}),
        ("none", "none"),
    ],
)
def test_tool_choice_in_the_chats_shape(choice, chat):
    assert chat_tool_fields({"tool_choice": choice}) == {"tools": [], "tool_choice": chat}


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ("w", "tools must be a list of function tools, got str"),
        ({"type": "function"}, "tools must be a list of function tools, got dict"),
        (["w"], "tools[0] is of type 'str'; this server runs function tools only"),
        (
            [{"type": "function", "name": "a"}, {"type": "web_search"}],
            "tools[1] is of type 'web_search'; this server runs function tools only",
        ),
        ([{"name": "a"}], "tools[0] is of type None; this server runs function tools only"),
        (
            [{"type": "x" * 600}],
            "tools[0] is of type '" + "x" * 499 + "... (102 more); this server runs function tools only",
        ),
    ],
)
def test_a_tool_that_is_not_a_function_is_a_400_naming_it(tools, message):
    err = refused(chat_tool_fields, {"tools": tools})
    assert (err.message, err.param) == (message, "tools")


def test_function_calls_become_one_assistant_message_with_tool_calls():
    items = [
        {"type": "function_call", "name": "w", "arguments": '{"city": "Oslo"}', "call_id": "c1", "id": "fc_1"},
        {"type": "function_call", "name": "t", "arguments": "{}", "call_id": "c2"},
    ]
    message = call_message(3, items)
    assert message.model_dump(exclude_none=True) == {
        "role": "assistant",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "w", "arguments": '{"city": "Oslo"}'}},
            {"id": "c2", "type": "function", "function": {"name": "t", "arguments": "{}"}},
        ],
    }
    assert "content" in message.model_dump() and message.content is None


@pytest.mark.parametrize("missing", ["name", "arguments", "call_id"])
@pytest.mark.parametrize("bad", [None, 7])
def test_a_function_call_without_a_string_field_is_a_400(missing, bad):
    good = {"name": "w", "arguments": "{}", "call_id": "c1"}
    err = refused(call_message, 2, [good, {**good, missing: bad}])
    assert err.message == "input[2] is a function_call without a string name, arguments and call_id"
    assert err.param == "input"


def test_a_function_call_output_becomes_a_tool_message():
    message = output_message(4, {"type": "function_call_output", "call_id": "c1", "output": "12 C"})
    assert message.model_dump(exclude_none=True) == {"role": "tool", "content": "12 C", "tool_call_id": "c1"}


@pytest.mark.parametrize(
    "item", [{"call_id": "c1"}, {"output": "12 C"}, {"call_id": 1, "output": "x"}, {"call_id": "c1", "output": ["x"]}]
)
def test_a_function_call_output_without_strings_is_a_400(item):
    err = refused(output_message, 5, item)
    assert err.message == "input[5] is a function_call_output without a string call_id and output"
    assert err.param == "input"
