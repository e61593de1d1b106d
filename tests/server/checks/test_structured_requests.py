"""Structured-output request fields read into one StructuredOutput (server/checks/structured.py), without a
grammar engine: each form of response_format and its 400s with their literal messages, a schema's default
(not strict), the size bounds at their edge in UTF-8 bytes as sent, and the choice regex character by character."""

import pytest

from tinyllm.errors import TinyLLMError
from tinyllm.grammar.structured import StructuredOutput
from tinyllm.server.checks.structured import bounded, choice_regex, from_choices, from_schema, structured_from
from tinyllm.server.wire.errors import APIError
from tinyllm.server.wire.limits import MAX_CHOICE_BYTES, MAX_GRAMMAR_BYTES
from tinyllm.server.wire.protocol import ChatCompletionRequest

S = StructuredOutput
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], **fields})


@pytest.mark.parametrize(
    "response_format, structured",
    [
        ({"type": "text"}, None),
        ({"type": "json_object"}, S.json_object()),
        ({"type": "json_object", "schema": SCHEMA}, S.json_schema(SCHEMA)),  # llama.cpp's form
        ({"type": "json_schema", "json_schema": {"name": "city"}}, S.json_object()),
        ({"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}}, S.json_schema(SCHEMA)),
        (
            {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": False}},
            S.json_schema(SCHEMA),
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}},
            S.json_schema(SCHEMA, strict=True),
        ),
    ],
)
def test_each_form_of_response_format(response_format, structured):
    field = None if structured is None else "response_format"
    assert structured_from(chat(response_format=response_format)) == (structured, field)


TYPES = 'response_format: response_format type must be "text", "json_object" or "json_schema", got '
NAMED = "response_format: response_format json_schema must be an object with a name (and a schema)"


@pytest.mark.parametrize(
    "response_format, message",
    [
        ("json_object", TYPES + "None"),
        ({"type": "xml"}, TYPES + "'xml'"),
        ({"type": "json_schema"}, NAMED),
        ({"type": "json_schema", "json_schema": {"schema": SCHEMA}}, NAMED),
        ({"type": "json_schema", "json_schema": {"name": 1, "schema": SCHEMA}}, NAMED),
        (
            {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": "yes"}},
            "response_format: response_format json_schema.strict must be a bool, got 'yes'",
        ),
    ],
)
def test_a_malformed_response_format_is_a_400_naming_it(response_format, message):
    with pytest.raises(APIError) as err:
        structured_from(chat(response_format=response_format))
    assert (err.value.status, err.value.message, err.value.param) == (400, message, "response_format")


def test_a_schema_is_not_strict_unless_asked():
    assert from_schema(SCHEMA) == S.json_schema(SCHEMA)
    assert from_schema(SCHEMA) != from_schema(SCHEMA, strict=True) == S.json_schema(SCHEMA, strict=True)


def outcome(build, value):
    try:
        return build(value)
    except TinyLLMError as exc:
        return str(exc)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "description": "é" * 30_000},
        '{"type": "object", "description": "' + "é" * 30_000 + '"}',
        '{"type": "object", "description": "' + '\\"' * 50_000 + '"}',  # 100 KB, 200 KB written as a JSON string
    ],
    ids=["dict", "text", "text-of-escapes"],
)
def test_the_bound_on_a_schema_counts_the_bytes_as_sent(schema):
    """Its UTF-8 bytes, not the schema written again as JSON (with \\u00e9 escapes, or as a string of JSON text):
    within the server's bound, so whatever the schema's own checks say is the answer."""
    assert outcome(from_schema, schema) == outcome(S.json_schema, schema)


def test_a_grammar_of_exactly_the_limit_is_kept():
    grammar = 'start: "' + "a" * (MAX_GRAMMAR_BYTES - len('start: ""')) + '"'
    assert len(grammar) == MAX_GRAMMAR_BYTES
    assert bounded(S.grammar)(grammar) == S.grammar(grammar)
    with pytest.raises(TinyLLMError) as err:
        bounded(S.grammar)(grammar + " ")
    limit = (
        f"{MAX_GRAMMAR_BYTES + 1} bytes is more than the limit of {MAX_GRAMMAR_BYTES} for a schema, regex or grammar"
    )
    assert str(err.value) == limit


def test_choices_of_exactly_the_byte_limit_are_kept():
    choices = [chr(ord("a") + i % 26) * 1024 for i in range(MAX_CHOICE_BYTES // 1024)]
    assert from_choices(choices) == S.grammar(f"start: /{choice_regex(choices)}/")


@pytest.mark.parametrize("value", [["a", ""], [], "a", ["a", 1]])
def test_choices_must_be_non_empty_strings(value):
    with pytest.raises(TinyLLMError) as err:
        from_choices(value)
    assert str(err.value) == f"a choice must be a non-empty list of non-empty strings, got {value!r}"


def test_the_choice_regex_keeps_letters_digits_and_printable_non_ascii_and_escapes_the_rest():
    choices = ["a1", "é€", "a.b c", "x\n", "\u200b/"]
    assert choice_regex(choices) == "(?:a1|é€|a\\x{2E}b\\x{20}c|x\\x{A}|\\x{200B}\\x{2F})"
