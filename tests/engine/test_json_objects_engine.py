"""JSON output through the engine on a tiny random model (the real SmolLM2 tokenizer), sampled hot so it
wanders: an open schema (objects that do not say additionalProperties) never repeats a key in one object, a
strict one never adds a key, and numbers are ones every JSON reader takes (int64 / finite float64)."""

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, SamplingParams, StructuredOutput

OPEN = {  # a raw Pydantic-style schema: no additionalProperties anywhere
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "pet": {"type": "object", "properties": {"kind": {"type": "string", "maxLength": 6}}},
    },
    "required": ["name", "age"],
}


@pytest.fixture(scope="module")
def llm(smollm_tokenizer):
    model = tiny_llama(5, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=512)
    return LLM.from_parts(model, smollm_tokenizer)


def keys_by_object(text: str) -> list[list[str]]:
    """Every object's keys in order, for a JSON text that may be cut short (a key is counted once its
    closing quote is there)."""
    stack: list[list[str]] = []  # the keys of each open object; None for an open array
    done: list[list[str]] = []
    expect_key, i = False, 0
    while i < len(text):
        c = text[i]
        if c == '"':
            end = _closing_quote(text, i)
            if end >= len(text):
                break
            if expect_key and stack and stack[-1] is not None:
                stack[-1].append(json.loads(text[i : end + 1]))
                expect_key = False
            i = end + 1
            continue
        if c == "{":
            stack.append([])
            expect_key = True
        elif c == "[":
            stack.append(None)
        elif c in "}]":
            top = stack.pop()
            if top is not None:
                done.append(top)
        elif c == "," and stack and stack[-1] is not None:
            expect_key = True
        i += 1
    return done + [s for s in stack if s is not None]


def _closing_quote(text: str, i: int) -> int:
    """The index of the quote that closes the string opened at text[i]; len(text) or more when it is not there."""
    end = i + 1
    while end < len(text) and text[end] != '"':
        end += 2 if text[end] == "\\" else 1
    return end


def check_number(value) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        assert -(2**63) <= value < 2**63, value
    elif isinstance(value, float):
        assert math.isfinite(value), value


def walk(value):
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v)


def generate(llm, structured, seeds, temperature):
    params = [SamplingParams(temperature=temperature, seed=s, max_tokens=96, structured=structured) for s in seeds]
    return llm.engine().generate([[5, 90, 310 + s % 50, 7] for s in seeds], params)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first_seed=st.integers(0, 10**6), temperature=st.sampled_from([1.0, 1.5, 2.0]))
def test_an_open_schema_never_repeats_a_key(llm, first_seed, temperature):
    for g in generate(llm, StructuredOutput.json_schema(OPEN), range(first_seed, first_seed + 8), temperature):
        for keys in keys_by_object(g.text):
            assert len(keys) == len(set(keys)), g.text
        if g.finish_reason == "stop":
            value = json.loads(g.text)
            for v in walk(value):
                check_number(v)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first_seed=st.integers(0, 10**6), temperature=st.sampled_from([1.0, 1.5, 2.0]))
def test_a_strict_schema_never_adds_a_key(llm, first_seed, temperature):
    strict = StructuredOutput.json_schema(OPEN, strict=True)
    declared = {"name", "age", "pet", "kind"}
    for g in generate(llm, strict, range(first_seed, first_seed + 8), temperature):
        for keys in keys_by_object(g.text):
            assert set(keys) <= declared and len(keys) == len(set(keys)), g.text
        if g.finish_reason == "stop":
            for v in walk(json.loads(g.text)):
                check_number(v)


def test_the_key_scanner_sees_repeats_in_nested_and_cut_text():
    assert keys_by_object('{"a":1,"b":{"a":2,"a":3},"c":"x\\"y","a"') == [["a", "a"], ["a", "b", "c", "a"]]
    assert keys_by_object('[{"\\u0041":1,"A":2}]') == [["A", "A"]]


def test_a_model_that_repeats_a_key_is_kept_from_it(smollm_tokenizer):
    from helpers.tiny_models import ScriptedModel
    from tinyllm import generate
    from tinyllm.grammar.constraint import Grammars

    tok = smollm_tokenizer
    # a key the schema does not name, twice (the grammar engine itself never repeats a named one)
    script = tok.encode('{"name":"Tom","cat":"x","cat":"y"}', add_special_tokens=False) + [tok.eos_id]
    prompt = [5, 90, 310]
    model = ScriptedModel(script, len(prompt), vocab_size=tok.vocab_size, max_len=512)
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}
    params = SamplingParams(temperature=0.0, max_tokens=24, structured=StructuredOutput.json_schema(schema))
    grammars = Grammars(tok, tok.vocab_size, tok.stop_ids)
    out = generate(model, tok, prompt, params, eos_ids=tok.stop_ids, grammars=grammars)
    assert out.text.startswith('{"name":"Tom","cat":"x","cat')  # the script is followed up to the repeat
    for keys in keys_by_object(out.text):
        assert len(keys) == len(set(keys)), out.text
