"""Spec limits: bytes per kind, schema depth (the last allowed depth compiles, one more is refused) and object
count, each a one-sentence TinyLLMError, and deep or cyclic input never reaches a RecursionError."""

import json

import pytest

from tinyllm import StructuredOutput, TinyLLMError
from tinyllm.grammar.spec_limits import MAX_SCHEMA_DEPTH, MAX_SCHEMA_OBJECTS, MAX_SPEC_BYTES


def nested_arrays(depth: int) -> dict:
    """A schema document exactly `depth` levels deep: arrays of arrays of ... integers."""
    schema = {"type": "integer"}
    for _ in range(depth - 1):
        schema = {"type": "array", "items": schema}
    return schema


def test_the_deepest_allowed_schema_compiles_and_one_level_more_is_refused(ll_matcher, ll_tokenizer):
    deepest = nested_arrays(MAX_SCHEMA_DEPTH)
    text = "[" * (MAX_SCHEMA_DEPTH - 1) + "7" + "]" * (MAX_SCHEMA_DEPTH - 1)
    for spec in (deepest, json.dumps(deepest)):
        matcher = ll_matcher(StructuredOutput.json_schema(spec))
        assert matcher.consume_tokens(ll_tokenizer.tokenize_str(text)) and matcher.is_accepting()
    too_deep = nested_arrays(MAX_SCHEMA_DEPTH + 1)
    with pytest.raises(TinyLLMError, match="the json_schema nests 65 levels of objects and arrays; at most 64"):
        StructuredOutput.json_schema(json.dumps(too_deep))
    with pytest.raises(TinyLLMError, match="the json_schema nests more than 64 levels of objects and arrays"):
        StructuredOutput.json_schema(too_deep)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000 + "]" * 5000,
        '{"a":' * 5000 + "1" + "}" * 5000,
        '{"type": "object", "properties": {"x": ' + '{"anyOf": [' * 3000 + "{}" + "]}" * 3000 + "}}",
    ],
)
def test_text_nested_thousands_deep_is_a_one_line_error_not_a_recursion_error(text):
    with pytest.raises(TinyLLMError, match=r"the json_schema nests \d+ levels of objects and arrays") as info:
        StructuredOutput.json_schema(text)
    assert "\n" not in str(info.value)


def test_brackets_inside_strings_do_not_count_as_depth():
    schema = {"type": "string", "description": "[" * 200 + "{" * 200, "pattern": '^\\[\\{"$'}
    assert json.loads(StructuredOutput.json_schema(json.dumps(schema)).spec)["description"] == schema["description"]


def test_dicts_nested_thousands_deep_and_cyclic_dicts_are_refused():
    deep: dict = {"type": "integer"}
    for _ in range(5000):
        deep = {"type": "array", "items": deep}
    with pytest.raises(TinyLLMError, match="nests more than 64 levels"):
        StructuredOutput.json_schema(deep)
    cyclic: dict = {"type": "object", "properties": {}}
    cyclic["properties"]["self"] = cyclic
    with pytest.raises(TinyLLMError, match="nests more than 64 levels"):
        StructuredOutput.json_schema(cyclic)


@pytest.mark.parametrize("as_text", [False, True])
def test_the_object_count_is_bounded(as_text):
    def schema(n):  # n JSON objects in all
        doc = {"anyOf": [{} for _ in range(n - 1)]}
        return json.dumps(doc) if as_text else doc

    StructuredOutput.json_schema(schema(MAX_SCHEMA_OBJECTS))
    with pytest.raises(TinyLLMError, match=f"objects; at most {MAX_SCHEMA_OBJECTS:,} are allowed"):
        StructuredOutput.json_schema(schema(MAX_SCHEMA_OBJECTS + 1))


@pytest.mark.parametrize("kind", ["json_schema", "regex", "grammar"])
def test_specs_are_bounded_in_bytes_per_kind(kind):
    limit = MAX_SPEC_BYTES[kind]

    def spec(size):  # a valid spec of exactly `size` UTF-8 bytes
        if kind == "json_schema":
            head = '{"type": "string", "description": "'
            return head + "x" * (size - len(head) - 2) + '"}'
        if kind == "regex":
            return "a" * size
        return 'start: "' + "a" * (size - 9) + '"'

    assert len(spec(limit).encode()) == limit
    StructuredOutput(kind, spec(limit))
    with pytest.raises(TinyLLMError, match=f"the {kind} is {limit + 1:,} bytes; at most {limit:,} are allowed"):
        StructuredOutput(kind, spec(limit + 1))


def test_bytes_not_characters_are_counted():
    limit = MAX_SPEC_BYTES["regex"]
    with pytest.raises(TinyLLMError, match=f"the regex is {2 * (limit // 2 + 1):,} bytes"):
        StructuredOutput.regex("é" * (limit // 2 + 1))  # two bytes each in UTF-8


def spec_of_size(kind: str, size: int) -> str:
    """A valid spec of `kind` of exactly `size` UTF-8 bytes."""
    if kind == "json_schema":
        head = '{"type": "string", "description": "'
        return head + "x" * (size - len(head) - 2) + '"}'
    if kind == "regex":
        return "a" * size
    return 'start: "' + "a" * (size - 9) + '"'


# The documented limits written out as numbers, so a limit that drifts from them by any factor fails here
# (the tests above read the limits from the constants they test).
@pytest.mark.parametrize("kind, limit", [("json_schema", 65536), ("regex", 65536), ("grammar", 262144)])
def test_the_byte_limits_are_64_kib_for_schemas_and_regexes_and_256_kib_for_grammars(kind, limit):
    StructuredOutput(kind, spec_of_size(kind, limit))
    with pytest.raises(TinyLLMError, match=f"the {kind} is {limit + 1:,} bytes; at most {limit:,} are allowed"):
        StructuredOutput(kind, spec_of_size(kind, limit + 1))


@pytest.mark.parametrize("as_text", [False, True])
def test_the_depth_limit_is_64_levels_and_the_object_limit_4096(as_text):
    def spec(doc):
        return StructuredOutput.json_schema(json.dumps(doc) if as_text else doc)

    spec(nested_arrays(64))
    depth = "65" if as_text else "more than 64"  # text is measured; a walk of values stops one level past
    with pytest.raises(TinyLLMError, match=f"nests {depth} levels of objects and arrays; at most 64 are allowed"):
        spec(nested_arrays(65))
    spec({"anyOf": [{} for _ in range(4095)]})  # 4,096 objects with the outer one
    count = "4,097" if as_text else "more than 4,096"
    with pytest.raises(TinyLLMError, match=f"the json_schema has {count} objects; at most 4,096 are allowed"):
        spec({"anyOf": [{} for _ in range(4096)]})


def test_a_schema_text_with_no_brackets_has_no_depth():
    from tinyllm.grammar.spec_limits import check_json_text_shape

    for text in ("true", '"a [string] {of} brackets"', ""):
        check_json_text_shape(text)  # nothing to refuse: not a ValueError or TypeError from an empty max()


@pytest.mark.parametrize("as_text", [False, True])
def test_a_schema_is_sized_in_its_utf8_bytes_whether_sent_as_a_dict_or_as_text(as_text):
    """A dict is written back as JSON with its characters as they are (not \\u00e9 escapes, six bytes for two):
    a description of 30,000 "é" is 60 KB either way, within the 64 KiB limit; 33,000 of them are over it."""
    for count, fits in ((30_000, True), (33_000, False)):
        schema = {"type": "object", "description": "é" * count}
        spec = json.dumps(schema, ensure_ascii=False) if as_text else schema
        if fits:
            StructuredOutput.json_schema(spec)
        else:
            with pytest.raises(TinyLLMError, match=r"the json_schema is 66,0\d\d bytes; at most 65,536 are allowed"):
                StructuredOutput.json_schema(spec)
