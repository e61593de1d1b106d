"""StructuredOutput and its place in SamplingParams: kinds, normalised schemas, one-sentence errors."""

import json

import pytest

from tinyllm import SamplingParams, StructuredOutput, TinyLLMError


def test_a_schema_dict_and_its_text_are_the_same_value_and_keep_key_order():
    schema = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}
    from_dict, from_text = StructuredOutput.json_schema(schema), StructuredOutput.json_schema(json.dumps(schema))
    assert from_dict == from_text and hash(from_dict) == hash(from_text)
    assert list(json.loads(from_dict.spec)["properties"]) == ["b", "a"]
    assert SamplingParams(structured=from_dict) == SamplingParams(structured=from_text)


@pytest.mark.parametrize(
    "kind, spec, message",
    [
        ("yaml", "x", "kind must be one of json_object, json_schema, regex, grammar, got 'yaml'"),
        ("json_schema", "{not json", "the json_schema is not valid JSON"),
        ("json_schema", "[1, 2]", "the json_schema must be a JSON object, got list"),
        ("regex", "", "a regex constraint needs a non-empty string"),
        ("grammar", 5, "a grammar constraint needs a non-empty string, got 5"),
        ("json_object", "{}", "a json_object constraint takes no spec"),
    ],
)
def test_bad_specs_are_refused_naming_the_value(kind, spec, message):
    with pytest.raises(TinyLLMError, match=message.replace("(", r"\(").replace("[", r"\[")):
        StructuredOutput(kind, spec)


def test_params_refuse_a_non_structured_value_and_ignore_eos():
    with pytest.raises(TinyLLMError, match="structured must be None or a StructuredOutput, got dict"):
        SamplingParams(structured={"type": "json_object"})
    with pytest.raises(TinyLLMError, match="ignore_eos cannot be combined with structured output"):
        SamplingParams(ignore_eos=True, structured=StructuredOutput.json_object())


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: StructuredOutput("regex", "a", strict=True), "strict applies to a json_schema"),
        (lambda: StructuredOutput("grammar", 'start: "a"', bounded_numbers=False), "bounded_numbers applies to JSON"),
        (lambda: StructuredOutput.json_schema({}, strict=1), "strict must be a bool, got 1"),
        (lambda: StructuredOutput.json_object(bounded_numbers="no"), "bounded_numbers must be a bool, got 'no'"),
    ],
)
def test_the_json_flags_are_checked(build, message):
    with pytest.raises(TinyLLMError, match=message):
        build()


def test_the_flags_are_part_of_the_value_and_json_object_has_a_schema():
    schema = {"type": "object", "properties": {"n": {"type": "number"}}}
    values = {
        StructuredOutput.json_schema(schema),
        StructuredOutput.json_schema(schema, strict=True),
        StructuredOutput.json_schema(schema, bounded_numbers=False),
        StructuredOutput.json_schema(schema, strict=True, bounded_numbers=False),
    }
    assert len(values) == 4  # frozen and hashable, each flag kept
    assert json.loads(StructuredOutput.json_object(bounded_numbers=False).schema_text) == {"type": "object"}
    bounded = json.loads(StructuredOutput.json_object().schema_text)
    assert bounded["type"] == "object" and bounded["$defs"]["json_value"]["multipleOf"] == 1e-6
    with pytest.raises(TinyLLMError, match="a regex constraint has no JSON schema"):
        _ = StructuredOutput.regex("a").schema_text
