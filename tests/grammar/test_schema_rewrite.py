"""The stored schema: strict objects closed (and nothing else), numbers bounded by default (every text the grammar
allows parses into an int64 / a finite float64 of at most 15 + 6 digits, checked by random walks through the
grammar engine's mask), a schema's own bounds kept, and the rewrite a no-op on its own output."""

import copy
import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinyllm import StructuredOutput
from tinyllm.grammar.schema_rewrite import INTEGER_MAX, INTEGER_MIN, rewritten

WALKS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BOUNDED_NUMBER = re.compile(rb"-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,6})?")
INTEGER = re.compile(rb"-?(0|[1-9][0-9]*)")


def stored(schema, **flags):
    return json.loads(StructuredOutput.json_schema(schema, **flags).spec)


def accepts(matcher, tokenizer, text: str) -> bool:
    matcher = matcher.deep_copy()
    return matcher.consume_tokens(tokenizer.tokenize_str(text)) and matcher.is_accepting()


@WALKS
@given(seed=st.integers(0, 2**32 - 1), p_stop=st.sampled_from([0.0, 0.05, 0.3]))
def test_every_bounded_integer_parses_into_an_int64(ll_matcher, walk, seed, p_stop):
    text, finished = walk(ll_matcher(StructuredOutput.json_schema({"type": "integer"})), seed, p_stop)
    assert finished and INTEGER.fullmatch(text)
    value = json.loads(text)
    assert isinstance(value, int) and INTEGER_MIN <= value <= INTEGER_MAX
    assert INTEGER_MIN >= -(2**63) and INTEGER_MAX <= 2**63 - 1


@WALKS
@given(seed=st.integers(0, 2**32 - 1), p_stop=st.sampled_from([0.0, 0.05, 0.3]))
def test_every_bounded_number_parses_into_a_float64_of_at_most_15_and_6_digits(ll_matcher, walk, seed, p_stop):
    text, finished = walk(ll_matcher(StructuredOutput.json_schema({"type": "number"})), seed, p_stop)
    assert finished and BOUNDED_NUMBER.fullmatch(text), text
    value = float(json.loads(text))
    assert math.isfinite(value) and abs(value) < 1e15
    if len(text.lstrip(b"-").replace(b".", b"").lstrip(b"0")) <= 15:
        assert repr(value) == repr(float(text)) and float(f"{value:.15g}") == value  # exact in float64


def test_the_walks_reach_the_bounds(ll_matcher, walk):
    """With no stop until forced, a walk writes the longest number allowed: the bounds, not the walk, end it."""
    integer, _ = walk(ll_matcher(StructuredOutput.json_schema({"type": "integer"})), seed=3, p_stop=0.0)
    number, _ = walk(ll_matcher(StructuredOutput.json_schema({"type": "number"})), seed=3, p_stop=0.0)
    assert len(integer.lstrip(b"-")) == 19 and re.fullmatch(rb"-?(0|[1-9][0-9]{0,14})\.[0-9]{6}", number)


def test_unbounded_numbers_run_on_without_the_default(ll_matcher, walk):
    for schema in ({"type": "integer"}, {"type": "number"}):
        text, finished = walk(ll_matcher(StructuredOutput.json_schema(schema, bounded_numbers=False)), 5, 0.0, 40)
        assert not finished and len(text) >= 40


def test_free_values_have_bounded_numbers_at_any_depth(ll_matcher, ll_tokenizer):
    for structured in (
        StructuredOutput.json_object(),
        StructuredOutput.json_schema({"type": "object"}),
        StructuredOutput.json_schema({"type": "object", "properties": {"a": {}, "b": True}}),
        StructuredOutput.json_schema({"type": "array"}),
    ):
        matcher = ll_matcher(structured)
        wrap = (lambda v: f"[{v}]") if "array" in structured.schema_text[:60] else (lambda v: f'{{"a":{v}}}')
        for good in ("1.5", "-3", '[0.000001,{"b":[999999999999999]}]', '"x"', "null"):
            assert accepts(matcher, ll_tokenizer, wrap(good)), (structured, good)
        for bad in ("1e5", "1000000000000000", "0.0000001", '[{"b":[12345678901234567]}]'):
            assert not accepts(matcher, ll_tokenizer, wrap(bad)), (structured, bad)
    free = ll_matcher(StructuredOutput.json_object(bounded_numbers=False))
    assert accepts(free, ll_tokenizer, '{"a":[1e400,12345678901234567890]}')


def test_a_schemas_own_bounds_are_kept_and_only_open_sides_get_the_default():
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "exclusiveMinimum": 0},
            "big": {"type": "number", "maximum": 1e20, "multipleOf": 0.5},
            "both": {"type": ["integer", "null"], "minimum": -5, "maximum": 5},
            "choice": {"enum": [1e300]},
            "neg": {"not": {"type": "number"}},
            "below": {"type": "integer", "exclusiveMaximum": 10},
            "above": {"type": "number", "exclusiveMinimum": 0},
        },
    }
    props = stored(schema)["properties"]
    assert props["below"] == {"type": "integer", "exclusiveMaximum": 10, "minimum": INTEGER_MIN}
    assert props["above"] == {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e15, "multipleOf": 1e-6}
    assert props["n"] == {"type": "integer", "exclusiveMinimum": 0, "maximum": INTEGER_MAX}
    assert props["big"] == {"type": "number", "maximum": 1e20, "multipleOf": 0.5, "exclusiveMinimum": -1e15}
    assert props["both"] == {"type": ["integer", "null"], "minimum": -5, "maximum": 5}
    assert props["choice"] == {"enum": [1e300]} and props["neg"] == {"not": {"type": "number"}}


def test_bounded_numbers_off_and_strict_off_store_the_schema_as_given():
    schema = {"type": "object", "properties": {"a": {"type": "number"}, "b": {}}, "required": ["a"]}
    assert stored(schema, bounded_numbers=False) == schema


def test_strict_closes_every_object_that_does_not_say_otherwise():
    schema = {
        "type": "object",
        "properties": {
            "pet": {"$ref": "#/$defs/Pet"},
            "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
            "either": {"anyOf": [{"type": "object", "properties": {"a": {"type": "null"}}}, {"type": "null"}]},
            "open": {"type": "object", "additionalProperties": True},
            "typed": {"type": "object", "additionalProperties": {"type": "integer"}},
            "parts": {"allOf": [{"type": "object", "properties": {"x": {"type": "null"}}}]},
        },
        "$defs": {"Pet": {"properties": {"name": {"type": "string"}}, "required": ["name"]}},
    }
    out = stored(schema, strict=True, bounded_numbers=False)
    props = out["properties"]
    assert out["additionalProperties"] is False and out["$defs"]["Pet"]["additionalProperties"] is False
    assert props["tags"]["items"]["additionalProperties"] is False
    assert props["either"]["anyOf"][0]["additionalProperties"] is False
    assert props["open"]["additionalProperties"] is True and props["typed"]["additionalProperties"] == {
        "type": "integer"
    }
    assert "additionalProperties" not in props["parts"]["allOf"][0]  # a branch describes part of the object
    assert StructuredOutput.json_schema(schema, strict=True) != StructuredOutput.json_schema(schema)


def test_an_allof_branch_that_a_ref_also_names_stays_open():
    branch = {"type": "object", "properties": {"a": {"type": "string"}}}
    schema = {"type": "object", "allOf": [branch], "properties": {"x": {"$ref": "#/allOf/0"}}}
    out = stored(schema, strict=True, bounded_numbers=False)
    assert out["allOf"] == [branch] and out["additionalProperties"] is False


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 3}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


@WALKS
@given(seed=st.integers(0, 2**32 - 1), p_stop=st.sampled_from([0.0, 0.2, 0.6]))
def test_a_strict_open_schema_never_yields_extra_or_duplicate_keys(ll_matcher, walk, seed, p_stop):
    text, finished = walk(ll_matcher(StructuredOutput.json_schema(PERSON, strict=True)), seed, p_stop)
    pairs = json.loads(text, object_pairs_hook=lambda kv: kv)
    assert finished and [k for k, _ in pairs] == ["name", "age"]


def test_without_strict_the_same_walk_adds_keys(ll_matcher, walk):
    text, finished = walk(ll_matcher(StructuredOutput.json_schema(PERSON)), seed=1, p_stop=0.0, max_steps=60)
    assert not finished and re.search(rb'"age":-?[0-9]+,"', text)  # a third key, running on


SCHEMAS = st.recursive(
    st.sampled_from([{}, {"type": "integer"}, {"type": "number", "minimum": 0}, {"type": "string"}, {"$ref": "#"}]),
    lambda inner: st.one_of(
        st.builds(lambda p: {"type": "object", "properties": p}, st.dictionaries(st.sampled_from("abc"), inner)),
        st.builds(lambda i: {"type": "array", "items": i}, inner),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(inner, min_size=1, max_size=2)),
        st.builds(lambda t: {"type": ["null", t]}, st.sampled_from(["integer", "number", "object", "array"])),
        st.just(True),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(schema=SCHEMAS.filter(lambda s: isinstance(s, dict)), strict=st.booleans(), bounded=st.booleans())
def test_the_rewrite_only_adds_and_is_a_no_op_on_its_own_output(schema, strict, bounded):
    once = rewritten(copy.deepcopy(schema), strict, bounded)
    assert rewritten(copy.deepcopy(once), strict, bounded) == once
    stack = [(schema, once)]
    while stack:  # every key of the original is still there, with the same value where it was not a schema
        before, after = stack.pop()
        if before is True:
            assert after is True or set(after) == {"$ref"}
            continue
        for key, value in before.items():
            assert key in after
            if isinstance(value, (dict, bool)) and key in ("items", "additionalProperties"):
                stack.append((value, after[key]))
            elif key == "properties":
                stack.extend((value[k], after[key][k]) for k in value)
            elif key in ("anyOf", "allOf"):
                stack.extend(zip(value, after[key]))
            else:
                assert after[key] == value


@pytest.mark.parametrize("strict", [False, True])
def test_stored_schemas_compile(ll_matcher, strict):
    schema = {
        "type": "object",
        "properties": {"xs": {"type": "array", "items": {"type": "number"}}, "meta": {}, "id": {"type": "integer"}},
        "required": ["id"],
    }
    ll_matcher(StructuredOutput.json_schema(schema, strict=strict))
