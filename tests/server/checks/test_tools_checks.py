"""Tool calling's request fields (server/checks/tools.py) checked without a server: each malformed tool,
tool_choice and parallel_tool_calls is a 400 with its literal message and field, the schema-size bound at its
edge, the grammar of a forced call built from exactly the functions it may call, and parallel_tool_calls=false
keeping the first call only."""

import json

import pytest

from tinyllm.grammar.structured import StructuredOutput
from tinyllm.server.checks.tools import ToolRequest, tools_from
from tinyllm.server.wire.errors import APIError
from tinyllm.server.wire.limits import MAX_GRAMMAR_BYTES, MAX_TOOLS
from tinyllm.text.tool_calls import HERMES, MISTRAL, ParsedCall, ParsedOutput, call_grammar

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": CITY}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


def refused(sent: dict) -> APIError:
    with pytest.raises(APIError) as err:
        tools_from(sent, None)
    assert err.value.status == 400
    return err.value


def function(name: str, **fields) -> dict:
    return {"type": "function", "function": {"name": name, **fields}}


MUST_BE = 'tools[1] must be {"type": "function", "function": {...}}, got '


@pytest.mark.parametrize(
    "tool, message",
    [
        ({"type": "retrieval"}, MUST_BE + "{'type': 'retrieval'}"),
        (
            {"type": "retrieval", "function": {"name": "f"}},
            MUST_BE + "{'type': 'retrieval', 'function': {'name': 'f'}}",
        ),
        ("get_time", MUST_BE + "'get_time'"),
        ({"type": "function"}, 'tools[1] has no "function" object'),
        ({"type": "function", "function": "f"}, 'tools[1] has no "function" object'),
        (function("has space"), "tools[1] function.name must be 1 to 64 letters, digits, '_' or '-', got 'has space'"),
        (function("x" * 65), f"tools[1] function.name must be 1 to 64 letters, digits, '_' or '-', got '{'x' * 65}'"),
        (
            {"type": "function", "function": {}},
            "tools[1] function.name must be 1 to 64 letters, digits, '_' or '-', got None",
        ),
        (function("f", description=3), "tools[1] function.description must be a string"),
        (
            function("f", parameters={"type": "array"}),
            "tools[1] function.parameters must be a JSON schema of \"type\": \"object\", got {'type': 'array'}",
        ),
        (
            function("f", parameters="object"),
            'tools[1] function.parameters must be a JSON schema of "type": "object", got \'object\'',
        ),
        (function("f", strict="yes"), "tools[1] function.strict must be a bool"),
    ],
)
def test_a_malformed_tool_is_a_400_naming_its_index_and_problem(tool, message):
    err = refused({"tools": [WEATHER, tool]})
    assert (err.message, err.param) == (message, "tools")


@pytest.mark.parametrize(
    "tool",
    [
        function("f"),  # no parameters: a call without arguments
        function("f", parameters={"properties": {"n": {"type": "integer"}}}),  # "type" left out means an object
        function("f-2_x", description="", parameters={"type": "object"}, strict=True),
        function("x" * 64, strict=False),
    ],
)
def test_well_formed_tools_are_kept_as_sent(tool):
    tools = tools_from({"tools": [WEATHER, tool]}, None)
    assert tools == ToolRequest((WEATHER, tool), "auto", True, HERMES)


@pytest.mark.parametrize(
    "sent, message, param",
    [
        ({"tools": {"a": 1}}, "tools must be a list of function tools, got dict", "tools"),
        (
            {"tools": [function(f"f{i}") for i in range(MAX_TOOLS + 1)]},
            f"tools has {MAX_TOOLS + 1} tools, more than the limit of {MAX_TOOLS}",
            "tools",
        ),
        (
            {"tools": [WEATHER, TIME, WEATHER]},
            "tools names function 'get_weather' twice; names must be unique",
            "tools",
        ),
        (
            {"tools": [WEATHER], "parallel_tool_calls": "yes"},
            "parallel_tool_calls must be a bool, got 'yes'",
            "parallel_tool_calls",
        ),
        (
            {"tools": [WEATHER], "tool_choice": "sometimes"},
            'tool_choice must be "none", "auto", "required" or a function, got \'sometimes\'',
            "tool_choice",
        ),
        (
            {"tool_choice": "required"},
            "tool_choice 'required' needs tools; send tools or leave tool_choice out",
            "tool_choice",
        ),
        (
            {"tools": [], "tool_choice": "auto"},
            "tool_choice 'auto' needs tools; send tools or leave tool_choice out",
            "tool_choice",
        ),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function"}},
            'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}, '
            "got {'type': 'function'}",
            "tool_choice",
        ),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice names function 'nope', which is not in tools",
            "tool_choice",
        ),
    ],
)
def test_bad_tool_fields_are_a_400_naming_the_field(sent, message, param):
    err = refused(sent)
    assert (err.message, err.param) == (message, param)


@pytest.mark.parametrize(
    "sent, choice, parallel",
    [
        ({}, "auto", True),
        ({"tool_choice": "auto", "parallel_tool_calls": True}, "auto", True),
        ({"tool_choice": "none", "parallel_tool_calls": False}, "none", False),
        ({"tool_choice": "required"}, "required", True),
        ({"tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "get_time", True),
    ],
)
def test_tool_choice_and_parallel_calls(sent, choice, parallel):
    tools = tools_from({"tools": [WEATHER, TIME], **sent}, "{{ '[TOOL_CALLS]' }}")
    assert tools == ToolRequest((WEATHER, TIME), choice, parallel, MISTRAL)


def test_no_tools_is_no_tool_calling():
    assert tools_from({}, None) is None
    assert tools_from({"tools": [], "tool_choice": "none"}, None) is None


def _padded_tools(num_bytes: int) -> list[dict]:
    """Two tools whose parameter schemas are num_bytes of JSON together (as a list, UTF-8)."""

    def schemas_size(pad: str) -> int:
        schemas = [CITY, {"type": "object", "description": pad}]
        return len(json.dumps(schemas, ensure_ascii=False).encode("utf-8"))

    pad = "é" + "x" * (num_bytes - schemas_size("é"))
    assert schemas_size(pad) == num_bytes
    return [WEATHER, function("f", parameters={"type": "object", "description": pad})]


def test_the_parameter_schemas_are_bounded_together_at_the_limit():
    assert tools_from({"tools": _padded_tools(MAX_GRAMMAR_BYTES)}, None) is not None
    err = refused({"tools": _padded_tools(MAX_GRAMMAR_BYTES + 1)})
    assert err.param == "tools"
    assert err.message == (
        f"the tools' parameter schemas have {MAX_GRAMMAR_BYTES + 1} bytes of JSON together, more than the limit "
        f"of {MAX_GRAMMAR_BYTES}"
    )


def test_a_forced_call_is_held_to_the_functions_it_may_call():
    sent = {"tools": [WEATHER, TIME]}
    template = "{{ '[TOOL_CALLS]' }}"
    both = StructuredOutput.grammar(call_grammar(MISTRAL, [WEATHER["function"], TIME["function"]]))
    one = StructuredOutput.grammar(call_grammar(MISTRAL, [TIME["function"]]))
    assert tools_from({**sent, "tool_choice": "required"}, template).constraint() == both
    named = {"type": "function", "function": {"name": "get_time"}}
    assert tools_from({**sent, "tool_choice": named}, template).constraint() == one
    assert tools_from({**sent, "tool_choice": "auto"}, template).constraint() is None
    assert tools_from({**sent, "tool_choice": "none"}, template).constraint() is None


def test_a_function_whose_required_argument_contains_itself_is_a_400():
    loop = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}
    tools = tools_from({"tools": [function("f", parameters=loop)], "tool_choice": "required"}, None)
    with pytest.raises(APIError) as err:
        tools.constraint()
    assert (err.value.status, err.value.param) == (400, "tools")
    assert err.value.message == (
        "tools: the grammar has no finite sentence: rule 'start' needs a %json schema with no finite instance "
        "(property 'a' of #/properties/arguments is required, which leads back to #/properties/arguments)"
    )


def test_tools_reach_the_prompt_unless_tool_choice_is_none():
    sent = {"tools": [WEATHER, TIME]}
    assert tools_from({**sent, "tool_choice": "none"}, None).prompt_tools() is None
    for choice in ("auto", "required", {"type": "function", "function": {"name": "get_time"}}):
        assert tools_from({**sent, "tool_choice": choice}, None).prompt_tools() == [WEATHER, TIME]


TWO_CALLS = 'Let me look.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n' + HERMES.write(
    [{"name": "b", "arguments": {}}]
)
CALL_A, CALL_B = ParsedCall("a", '{"x": 1}'), ParsedCall("b", "{}")


@pytest.mark.parametrize(
    "parallel, text, parsed",
    [
        (True, TWO_CALLS, ParsedOutput("Let me look.", (CALL_A, CALL_B))),
        (False, TWO_CALLS, ParsedOutput("Let me look.", (CALL_A,))),
        (False, HERMES.write([{"name": "b", "arguments": {}}]), ParsedOutput("", (CALL_B,))),
        (False, "No call.", ParsedOutput("No call.", ())),
    ],
)
def test_without_parallel_calls_only_the_first_call_is_kept(parallel, text, parsed):
    assert ToolRequest((), "auto", parallel, HERMES).parse(text) == parsed
