"""Property-based fuzzing of the request schemas: hypothesis builds JSON bodies with every known field
either plausible or of a random JSON type, random extra fields, random nesting, and bodies that are not
objects or not JSON at all. Whatever comes in, the answer is never a 5xx (nor a streamed server
error), and the server still answers /health afterwards with nothing left running."""

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

CONTEXT = 192  # a short context bounds every generation, however large the max_tokens drawn

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12)
anything = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


text = st.text(max_size=40)
ids = st.lists(st.integers(0, 49151), min_size=1, max_size=6)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=20)}
)

# Valid values, so that many requests get as far as generating; then "edge" values (out of range, odd
# but well-typed) and, through `anything`, values of every other JSON type.
SAMPLING = {
    "model": (st.just("tiny"), st.text(max_size=5)),
    "max_tokens": (st.integers(1, 8), st.integers(-2, 0) | st.integers(9, 2**64)),
    "temperature": (st.floats(0, 2), st.floats(-2, 0, exclude_max=True) | st.floats(allow_nan=True)),
    "top_p": (st.floats(0.05, 1), st.floats(-1, 0) | st.floats(1, 3, exclude_min=True)),
    "top_k": (st.integers(-1, 50), st.integers(-10, -2)),
    "min_p": (st.floats(0, 1), st.floats(-1, 0, exclude_max=True) | st.floats(1, 3, exclude_min=True)),
    "repetition_penalty": (st.floats(0.5, 2), st.floats(-1, 0)),
    "presence_penalty": (st.floats(-2, 2), st.floats(2, 9, exclude_min=True)),
    "frequency_penalty": (st.floats(-2, 2), st.floats(-9, -2, exclude_max=True)),
    "seed": (st.integers(0, 2**40), st.integers(-5, -1) | st.integers(2**63 - 2, 2**64)),
    "stop": (text.filter(bool) | st.lists(text.filter(bool), max_size=3), st.just("") | st.just([""])),
    "stream": (st.booleans(), st.just(1)),
    "stream_options": (st.fixed_dictionaries({"include_usage": st.booleans()}), st.just({"include_usage": "yes"})),
    "n": (st.integers(1, 3), st.integers(-1, 0) | st.integers(17, 99)),
    "user": (text, st.just(1)),
    "ignore_eos": (st.booleans(), st.just("no")),
    "stop_token_ids": (st.lists(st.integers(0, 49151), max_size=3), st.lists(st.integers(-3, 2**64), max_size=3)),
}
CHAT = {
    **SAMPLING,
    "messages": (
        st.lists(message, min_size=1, max_size=3),
        st.lists(st.fixed_dictionaries({"role": text}, optional={"content": anything}), max_size=3),
    ),
    "logprobs": (st.booleans(), st.integers(0, 3)),
    "top_logprobs": (st.integers(0, 20), st.integers(21, 99)),
    "max_completion_tokens": (st.integers(1, 8), st.integers(-2, 0)),
}
COMPLETION = {
    **SAMPLING,
    "prompt": (
        text.filter(bool)
        | ids
        | st.lists(text.filter(bool), min_size=1, max_size=3)
        | st.lists(ids, min_size=1, max_size=3),
        st.just("") | st.just([]) | st.lists(st.integers(-5, 2**64), max_size=3) | st.just([[]]),
    ),
    "logprobs": (st.integers(0, 20), st.integers(21, 99) | st.booleans()),
}
TOKENIZE = {
    "model": SAMPLING["model"],
    "prompt": (text, st.just(None)),
    "messages": CHAT["messages"],
    "add_special_tokens": (st.booleans(), st.just(0)),
    "add_generation_prompt": (st.booleans(), st.just(0)),
}
DETOKENIZE = {
    "model": SAMPLING["model"],
    "tokens": (st.lists(st.integers(0, 49151), max_size=8), st.lists(st.integers(-5, 2**64), max_size=8)),
}


def with_logprobs(body: dict) -> dict:
    """A valid chat body asks for top_logprobs only together with logprobs."""
    return {**body, "logprobs": True} if "top_logprobs" in body else body


def bodies(fields: dict, required: tuple, fix=lambda body: body):
    """Valid bodies, valid ones with one field made odd, bodies of random fields, random extra fields,
    JSON that is not an object, and bytes that are not JSON."""
    valid = st.fixed_dictionaries(
        {k: fields[k][0] for k in required}, optional={k: v[0] for k, v in fields.items() if k not in required}
    ).map(fix)
    odd_value = st.sampled_from(sorted(fields)).flatmap(lambda k: st.tuples(st.just(k), fields[k][1] | anything))
    one_odd = st.tuples(valid, odd_value).map(lambda t: {**t[0], t[1][0]: t[1][1]})
    random = st.fixed_dictionaries({}, optional={k: v[0] | v[1] | anything for k, v in fields.items()})
    extras = st.dictionaries(st.text(max_size=10), anything, max_size=3)
    # Half valid: those are the bodies that get as far as the engine.
    kind = st.integers(0, 3).flatmap(lambda k: valid if k < 2 else one_odd if k == 2 else random)
    objects = st.tuples(kind, extras).map(lambda t: {**t[1], **t[0]})
    # allow_nan: Python's parser reads NaN and Infinity, so the server must refuse them itself.
    return (
        objects.map(lambda b: json.dumps(b).encode())
        | anything.map(lambda v: json.dumps(v).encode())
        | st.binary(max_size=30)
    )


@pytest.fixture(scope="module")
def http(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(3, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=CONTEXT), smollm_tokenizer
    )
    with ServerThread(create_app(llm, served_model_name="tiny", num_blocks=256)) as srv:
        with httpx.Client(base_url=srv.wait_ready().url, timeout=60) as client:
            yield client


def check(http: httpx.Client, path: str, body: bytes) -> None:
    r = http.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code < 500, (r.status_code, r.text, body)
    if r.status_code != 200:
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
    elif r.headers["content-type"].startswith("text/event-stream"):
        assert r.text.endswith("data: [DONE]\n\n")
        assert '"server_error"' not in r.text, (r.text, body)


FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@pytest.mark.slow
@FUZZ
@given(body=bodies(CHAT, ("messages", "max_tokens"), with_logprobs))
def test_fuzz_chat(http, body):
    check(http, "/v1/chat/completions", body)


@pytest.mark.slow
@FUZZ
@given(body=bodies(COMPLETION, ("prompt", "max_tokens")))
def test_fuzz_completions(http, body):
    check(http, "/v1/completions", body)


@settings(FUZZ, max_examples=80)
@given(tok=bodies(TOKENIZE, ()), detok=bodies(DETOKENIZE, ("tokens",)))
def test_fuzz_tokenize_detokenize(http, tok, detok):
    check(http, "/tokenize", tok)
    check(http, "/detokenize", detok)


def test_server_is_healthy_and_idle_after_fuzzing(http):
    health = http.get("/health")
    assert health.status_code == 200
    assert health.json()["running"] == 0 and health.json()["kv_blocks"]["used"] == 0
