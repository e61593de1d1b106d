"""The tool-call formats: what each family writes parses back to the same calls (for any names and
arguments), prose around calls is kept or refused as the parser promises, templates are told apart by
their markers, and the call grammar accepts exactly the calls it should."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinyllm.errors import TinyLLMError
from tinyllm.grammar.constraint import GrammarError, Grammars
from tinyllm.grammar.structured import StructuredOutput
from tinyllm.text.tool_calls import (
    DEFAULT_FORMAT,
    FORMATS,
    HERMES,
    LLAMA3_JSON,
    MISTRAL,
    ToolCallFormat,
    call_grammar,
    detect_format,
    parse_tool_calls,
)

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,20}", fullmatch=True)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
CALLS = st.lists(
    st.fixed_dictionaries(
        {"name": NAMES, "arguments": st.dictionaries(st.text(min_size=1, max_size=8), JSON_VALUES, max_size=4)}
    ),
    min_size=1,
    max_size=3,
)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@given(calls=CALLS)
def test_written_calls_parse_back(fmt, calls):
    parsed = parse_tool_calls(fmt.write(calls), fmt)
    assert parsed.content == ""
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == [(c["name"], c["arguments"]) for c in calls]


@pytest.mark.parametrize("fmt", [HERMES, MISTRAL], ids=lambda f: f.name)
def test_prose_before_calls_is_the_content(fmt):
    calls = [{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {}}]
    parsed = parse_tool_calls("Let me look that up.\n\n" + fmt.write(calls), fmt)
    assert parsed.content == "Let me look that up."
    assert [c.name for c in parsed.calls] == ["f", "g"]


def test_hermes_calls_may_end_without_their_closing_tag():
    parsed = parse_tool_calls('<tool_call>\n{"name": "f", "arguments": {"a": "b"}}', HERMES)
    assert parsed.calls[0].name == "f" and json.loads(parsed.calls[0].arguments) == {"a": "b"}


def test_arguments_written_as_json_text_are_read():
    parsed = parse_tool_calls('{"name": "f", "parameters": "{\\"a\\": 1}"}', LLAMA3_JSON)
    assert json.loads(parsed.calls[0].arguments) == {"a": 1}


@pytest.mark.parametrize(
    "text, fmt",
    [
        ("no call here", HERMES),
        ('<tool_call>\n{"name": "f", "arguments": {"a": </tool_call>', HERMES),  # broken JSON
        ('<tool_call>\n{"arguments": {}}\n</tool_call>', HERMES),  # no name
        ('<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>', HERMES),  # arguments not an object
        ('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call> and then prose', HERMES),
        ('Here: {"name": "f", "parameters": {}}', LLAMA3_JSON),  # a bare call must begin the answer
        ("[1, 2]", MISTRAL),
    ],
)
def test_text_that_is_not_made_of_calls_stays_prose(text, fmt):
    parsed = parse_tool_calls(text, fmt)
    assert parsed.calls == () and parsed.content == text


@pytest.mark.parametrize(
    "source, fmt",
    [
        ("{% for m in messages %}{{ m.content }}{% endfor %}", DEFAULT_FORMAT),
        (None, DEFAULT_FORMAT),
        ("{{- '<tool_call>\\n' }}{{ tool_call | tojson }}", HERMES),
        ("{{- '[TOOL_CALLS][' }}", MISTRAL),
        ('{{- "<|python_tag|>" }}{"name": function name, "parameters": dictionary of argument name}', LLAMA3_JSON),
    ],
)
def test_format_is_detected_from_the_template(source, fmt):
    assert detect_format(source) is fmt


def test_format_rejects_a_bad_args_key_and_a_call_that_cannot_start():
    with pytest.raises(ValueError, match="args_key"):
        ToolCallFormat("x", (), "<c>", "</c>", "args")
    with pytest.raises(ValueError, match="bare"):
        ToolCallFormat("x", (), "", "", "arguments")


WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "maximum": 7}},
    "required": ["city"],
    "additionalProperties": False,
}
FUNCTIONS = [{"name": "weather", "parameters": WEATHER}, {"name": "now"}]


@pytest.fixture(scope="module")
def grammars(smollm_tokenizer):
    return Grammars(smollm_tokenizer, smollm_tokenizer.vocab_size, smollm_tokenizer.stop_ids)


def _accepts(grammars, tokenizer, grammar: str, text: str) -> bool:
    """Whether the grammar takes `text` whole: every token allowed in turn, then the end of the text."""
    constraint = grammars.constraint(StructuredOutput.grammar(grammar))
    ids = tokenizer.encode(text, add_special_tokens=False)
    try:
        allowed = constraint.allowed(ids)
    except GrammarError:  # a token the grammar forbids
        return False
    return bool(allowed[tokenizer.eos_id])


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize(
    "calls, ok",
    [
        ([{"name": "weather", "arguments": {"city": "Paris", "days": 3}}], True),
        ([{"name": "now", "arguments": {}}], True),
        ([{"name": "weather", "arguments": {"days": 3}}], False),  # city is required
        ([{"name": "weather", "arguments": {"city": "Paris", "days": 9}}], False),  # above the maximum
        ([{"name": "other", "arguments": {}}], False),  # not one of the functions
        ([{"name": "now", "arguments": {}}, {"name": "now", "arguments": {}}], False),  # one call only
    ],
)
def test_call_grammar_accepts_exactly_valid_calls(grammars, smollm_tokenizer, fmt, calls, ok):
    grammar = call_grammar(fmt, FUNCTIONS)
    text = fmt.write(calls).replace(", ", ",").replace(": ", ":")  # the grammar's JSON is compact
    assert _accepts(grammars, smollm_tokenizer, grammar, text) is ok


def test_call_grammar_of_a_schema_the_engine_cannot_use_is_an_error(grammars):
    bad = call_grammar(HERMES, [{"name": "f", "parameters": {"type": "object", "minProperties": "x"}}])
    with pytest.raises(TinyLLMError, match="cannot be compiled"):
        grammars.compile(StructuredOutput.grammar(bad))


@pytest.mark.parametrize("extra, ok", [({}, False), ({"additionalProperties": True}, True)])
def test_undeclared_arguments_are_refused_unless_the_schema_allows_them(grammars, smollm_tokenizer, extra, ok):
    params = {"type": "object", "properties": {"a": {"type": "integer"}}, **extra}
    grammar = call_grammar(HERMES, [{"name": "f", "parameters": params}])
    text = HERMES.write([{"name": "f", "arguments": {"a": 1, "b": 2}}]).replace(", ", ",").replace(": ", ":")
    assert _accepts(grammars, smollm_tokenizer, grammar, text) is ok


PYDANTIC_PARAMETERS = {  # what `Model.model_json_schema()` gives for a model with a nested model
    "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
    "type": "object",
    "properties": {"at": {"$ref": "#/$defs/Point"}, "size": {"type": "number"}},
    "required": ["at", "size"],
}


@pytest.mark.parametrize(
    "arguments, ok",
    [
        ({"at": {"x": 3}, "size": 1.5}, True),
        ({"at": {"x": "3"}, "size": 1.5}, False),  # the reference is followed: x must be an integer
        ({"at": {"x": 3, "y": 4}, "size": 1.5}, False),  # and the referenced object is closed too
        ({"at": {"x": 3}, "size": 1e300}, False),  # numbers bounded as in every JSON output
    ],
)
def test_references_inside_a_functions_parameters_resolve_against_them(grammars, smollm_tokenizer, arguments, ok):
    grammar = call_grammar(HERMES, [{"name": "f", "parameters": PYDANTIC_PARAMETERS}])
    text = HERMES.write([{"name": "f", "arguments": arguments}]).replace(", ", ",").replace(": ", ":")
    assert _accepts(grammars, smollm_tokenizer, grammar, text) is ok
    assert PYDANTIC_PARAMETERS["properties"]["at"] == {"$ref": "#/$defs/Point"}  # the caller's schema untouched
