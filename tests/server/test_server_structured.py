"""Structured outputs over HTTP with the official openai client: response_format (json_object, json_schema and
the SDK's parse() with a Pydantic model), vLLM's guided_* / structured_outputs and llama.cpp's json_schema / grammar
extras on both endpoints; every answer obeys its constraint, streamed equals whole, and what cannot compile, or a
constraint sent twice, is a 400 naming the field."""

import json
import re
from typing import Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

MODEL = "tiny"
CHAT = [{"role": "user", "content": "Describe a city as JSON."}]
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Z][a-z]{2,8}$"},
        "population": {"type": "integer", "minimum": 1000, "maximum": 99999},
        "rivers": {"type": "array", "items": {"enum": ["Rhine", "Main", "Elbe"]}, "minItems": 1, "maxItems": 3},
    },
    "required": ["city", "population", "rivers"],
    "additionalProperties": False,
}


class City(BaseModel):
    name: str = Field(pattern="^[A-Z][a-z]{2,8}$")
    kind: Literal["town", "city"]
    area: int = Field(ge=1, le=500)


@pytest.fixture(scope="module")
def client(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(5, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=512), smollm_tokenizer
    )
    with ServerThread(create_app(llm, served_model_name=MODEL, num_blocks=256)) as srv:
        yield openai.OpenAI(base_url=f"{srv.wait_ready().url}/v1", api_key="x", max_retries=0, timeout=120)


def chat(client, **kw):
    kw.setdefault("max_tokens", 150)
    return client.chat.completions.create(model=MODEL, messages=CHAT, **kw)


def complete(client, **kw):
    return client.completions.create(model=MODEL, prompt="A city:", max_tokens=150, **kw)


def json_schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}}


def test_response_format_json_schema_validates_for_every_choice(client):
    r = chat(client, seed=3, n=6, temperature=1.2, response_format=json_schema_format(SCHEMA))
    for choice in r.choices:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), SCHEMA)


def test_response_format_json_object_is_a_json_object(client):
    # Any object may hold an endless string, which a random model rarely closes: the choices that stop
    # are whole objects, the others (cut by max_tokens) are the start of one.
    r = chat(client, seed=1, n=4, max_tokens=100, response_format={"type": "json_object"})
    stopped = [c.message.content for c in r.choices if c.finish_reason == "stop"]
    assert stopped and all(isinstance(json.loads(text), dict) for text in stopped)
    assert all(c.message.content.startswith("{") for c in r.choices)


def test_the_sdk_parses_a_pydantic_model(client):
    for seed in range(3):
        r = client.chat.completions.parse(model=MODEL, messages=CHAT, max_tokens=150, seed=seed, response_format=City)
        city = r.choices[0].message.parsed
        assert isinstance(city, City) and city.kind in ("town", "city") and 1 <= city.area <= 500


def test_llama_cpps_json_object_with_a_schema_is_held_to_the_schema(client):
    r = chat(client, seed=3, n=4, temperature=1.2, response_format={"type": "json_object", "schema": SCHEMA})
    for choice in r.choices:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), SCHEMA)


def test_streamed_equals_whole(client):
    kw = dict(seed=7, temperature=1.0, response_format=json_schema_format(SCHEMA))
    whole = chat(client, **kw).choices[0].message.content
    pieces = [c.choices[0].delta.content or "" for c in chat(client, stream=True, **kw) if c.choices]
    assert "".join(pieces) == whole


@pytest.mark.parametrize(
    "extra", [{"guided_json": SCHEMA}, {"json_schema": SCHEMA}, {"structured_outputs": {"json": SCHEMA}}]
)
def test_schema_extras_on_completions(client, extra):
    r = complete(client, seed=2, n=3, extra_body=extra)
    for choice in r.choices:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.text), SCHEMA)


def test_regex_choice_and_grammar_extras(client):
    pattern = r"[A-Z][a-z]{2,5}-[0-9]{2}"
    for r in (
        complete(client, seed=4, n=3, extra_body={"guided_regex": pattern}),
        complete(client, seed=4, n=3, extra_body={"structured_outputs": {"regex": pattern}}),
    ):
        assert all(re.fullmatch(pattern, c.text) for c in r.choices)
    choices = ["yes", "no", 'say "maybe"']
    r = chat(client, seed=5, n=4, extra_body={"guided_choice": choices})
    assert all(c.message.content in choices for c in r.choices)
    gbnf = 'root ::= "[" [a-c] ("," [a-c])* "]"'
    r = complete(client, seed=6, n=3, extra_body={"grammar": gbnf})
    assert all(re.fullmatch(r"\[[a-c](,[a-c])*\]", c.text) for c in r.choices)


@pytest.mark.parametrize(
    "kw, param, message",
    [
        (
            dict(response_format=json_schema_format({"type": "nope"})),
            "response_format",
            "the json_schema cannot be compiled",
        ),
        (dict(response_format={"type": "xml"}), "response_format", "response_format: response_format type must be"),
        (
            dict(response_format={"type": "json_schema", "json_schema": {"schema": {}}}),
            "response_format",
            "must be an object with a name",
        ),
        (dict(extra_body={"guided_regex": "a("}), "guided_regex", "the regex cannot be compiled"),
        (
            dict(extra_body={"guided_json": SCHEMA, "guided_regex": "a"}),
            "guided_regex",
            "only one structured-output field may be sent",
        ),
        (dict(extra_body={"structured_outputs": {}}), "structured_outputs", "must set exactly one of"),
        (
            dict(ignore_eos=True, response_format={"type": "json_object"}, extra_body={}),
            "ignore_eos",
            "ignore_eos cannot be combined with structured output",
        ),
    ],
)
def test_bad_constraints_are_400_naming_the_field(client, kw, param, message):
    ignore_eos = kw.pop("ignore_eos", None)
    if ignore_eos is not None:
        kw["extra_body"] = {**kw["extra_body"], "ignore_eos": ignore_eos}
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, **kw)
    assert info.value.body["param"] == param and message in info.value.body["message"]
    assert chat(client, seed=1, max_tokens=2).choices[0].message.content is not None  # still serving


OPEN_SCHEMA = {  # objects that do not say whether they take other keys, as Pydantic's model_json_schema()
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer", "maximum": 99}},
    "required": ["name", "age"],
}


@pytest.mark.parametrize("strict", [True, False])
def test_a_strict_schema_closes_open_objects(client, strict):
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": OPEN_SCHEMA, "strict": strict}}
    r = chat(client, max_tokens=60, temperature=1.5, n=12, seed=9, response_format=fmt)
    # another key after the two the schema names (finished or not: an invented key often never ends)
    more_keys = [re.match(r'\{"name":"(?:[^"\\]|\\.)*","age":-?\d+,', c.message.content) for c in r.choices]
    if strict:
        assert not any(more_keys) and all(c.finish_reason == "stop" for c in r.choices)
        assert all(set(json.loads(c.message.content)) == {"name", "age"} for c in r.choices)
    else:  # open: the random model writes keys of its own, which is what strict is for
        assert any(more_keys)


def test_grammars_compile_on_grammar_threads_never_on_the_loop_or_the_engine(client, monkeypatch):
    import threading

    from tinyllm.grammar import constraint

    seen = []
    real = constraint.grammar_text
    monkeypatch.setattr(constraint, "grammar_text", lambda s: seen.append(threading.current_thread().name) or real(s))
    schema = {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["zip"]}
    r = chat(client, response_format=json_schema_format(schema), max_tokens=40)
    assert re.fullmatch(r"[0-9]{5}", json.loads(r.choices[0].message.content)["zip"])
    r = complete(client, extra_body={"guided_regex": "[a-f]{3}-[0-9]{2}"})
    assert re.fullmatch("[a-f]{3}-[0-9]{2}", r.choices[0].text)
    assert len(seen) == 2 and all(name.startswith("tinyllm-grammar-compile") for name in seen), seen
