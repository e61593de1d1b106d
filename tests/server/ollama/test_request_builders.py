"""Ollama's requests as the OpenAI ones the engine runs, and the small answers, built without a server
(server/ollama/requests.py, answer.py, routes.py): renamed fields in errors, assistant tool calls, a raw prompt's
completion request, the load/unload answer, one NDJSON line, an error's headers and `dimensions`' bounds."""

import json
import re

import pytest
import torch

from helpers.live_server import tiny_llm
from tinyllm.server.model_slots import Ready
from tinyllm.server.ollama import requests, routes
from tinyllm.server.ollama.answer import _line, load_answer, unload_answer
from tinyllm.server.ollama.options import Sampling
from tinyllm.server.ollama.protocol import GenerateBody, Message
from tinyllm.server.wire.errors import APIError

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


@pytest.mark.parametrize(
    ("param", "message", "renamed"),
    [
        ("max_tokens", "max_tokens must be at least 1", "options.num_predict must be at least 1"),
        ("stop", "too many strings", "options.stop: too many strings"),
    ],
)
def test_an_error_names_the_field_as_ollama_spells_it(param, message, renamed):
    got = requests.renamed(APIError(413, message, param=param, code="too_long"))
    assert (got.status, got.message, got.param, got.code) == (413, renamed, requests.RENAMED[param], "too_long")


def test_an_error_on_a_field_ollama_shares_is_kept():
    exc = APIError(400, "bad", param="temperature")
    assert requests.renamed(exc) is exc and requests.renamed(APIError(400, "bad")).param is None


@pytest.mark.parametrize(
    ("call", "function"),
    [
        (
            {"function": {"name": "w", "arguments": {"city": "Zürich"}}},
            {"name": "w", "arguments": '{"city": "Zürich"}'},
        ),
        ({"function": {"name": "w", "arguments": '{"a": 1}'}}, {"name": "w", "arguments": '{"a": 1}'}),
        ({"function": {"name": "w"}}, {"name": "w", "arguments": "{}"}),
    ],
)
def test_an_assistant_tool_call_becomes_the_chats(call, function):
    assert requests._tool_call(2, call) == {"id": "call_2", "type": "function", "function": function}


@pytest.mark.parametrize(
    ("call", "shown"),
    [("w", "'w'"), ({"function": None}, "{'function': None}"), ({"function": {"name": 3}}, "{'function': {'name': 3}}"),
     ({"name": "w"}, "{'name': 'w'}")],
)  # fmt: skip
def test_a_malformed_tool_call_is_a_400_showing_it(call, shown):
    with pytest.raises(APIError) as err:
        requests._tool_call(1, call)
    assert err.value.status == 400 and err.value.param == "messages"
    assert err.value.message == (
        f'messages[].tool_calls[1] must be {{"function": {{"name": ..., "arguments": {{...}}}}}}, got {shown}'
    )


@pytest.mark.parametrize(("logprobs", "top", "expected"), [(True, 3, 3), (True, None, 0), (False, None, None)])
def test_a_raw_prompt_is_a_completion_of_its_ids(logprobs, top, expected):
    body = GenerateBody.model_validate(
        {"model": "tiny:latest", "prompt": "hi", "raw": True, "logprobs": logprobs, "top_logprobs": top}
    )
    request = requests.raw_request(body, Sampling({"temperature": 0.5}), [5, 6, 7], 9)
    assert (request.model, request.prompt, request.max_tokens) == ("tiny", [5, 6, 7], 9)
    assert (request.temperature, request.logprobs) == (0.5, expected)
    assert "top_logprobs" not in request.model_dump(exclude_none=True)


@pytest.mark.parametrize(
    ("answer", "piece"),
    [
        (load_answer("m", True), {"message": {"role": "assistant", "content": ""}, "done_reason": "load"}),
        (load_answer("m", False), {"response": "", "done_reason": "load"}),
        (unload_answer("m", False), {"response": "", "done_reason": "unload"}),
    ],
)
def test_a_request_with_nothing_to_generate_answers_done(answer, piece):
    assert STAMP.fullmatch(answer.pop("created_at"))
    assert answer == {"model": "m", "done": True, **piece}


def test_a_line_is_unescaped_json_and_a_newline():
    assert _line({"response": "é 日本"}) == '{"response": "é 日本"}\n'
    assert json.loads(_line({"done": True})) == {"done": True}


def test_an_error_answers_ollamas_shape_with_its_headers():
    response = routes.error_response(APIError(401, "a key is needed"))
    assert (response.status_code, json.loads(response.body)) == (401, {"error": "a key is needed"})
    assert response.headers["www-authenticate"] == "Bearer"
    assert "retry-after" in routes.error_response(APIError(503, "busy", headers={"Retry-After": "1"})).headers


@pytest.mark.parametrize(("dimensions", "width"), [(None, None), (64, None), (1, 1), (63, 63)])
def test_dimensions_keep_the_first_values(smollm_tokenizer, dimensions, width):
    ctx = Ready(llm=tiny_llm(smollm_tokenizer), engine=None, texts=None, model_name="tiny", limits=None)
    assert routes._embed_width(dimensions, ctx) == width


@pytest.mark.parametrize("dimensions", [0, -1, 65, True])
def test_dimensions_out_of_range_are_a_400(smollm_tokenizer, dimensions):
    ctx = Ready(llm=tiny_llm(smollm_tokenizer), engine=None, texts=None, model_name="tiny", limits=None)
    with pytest.raises(APIError) as err:
        routes._embed_width(dimensions, ctx)
    assert err.value.param == "dimensions"
    assert err.value.message == f"dimensions must be between 1 and the model's 64 dimensions, got {dimensions!r}"


def test_shortened_vectors_are_normalized_again():
    vectors = torch.tensor([[3.0, 4.0, 12.0], [0.0, 2.0, 1.0]]) / torch.tensor([[13.0], [5**0.5]])
    assert torch.allclose(routes._shortened(vectors, 2), torch.tensor([[0.6, 0.8], [0.0, 1.0]]))
    assert routes._shortened(vectors, None) is vectors


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("images", ["x"], "images are not supported: this model reads text only"),
        ("thinking", "hmm", "thinking is not supported: this model does not reason"),
    ],
)
def test_a_message_with_images_or_thinking_is_a_400_naming_it(field, value, why):
    with pytest.raises(APIError) as err:
        requests.openai_message(3, Message(role="user", content="hi", **{field: value}))
    assert (err.value.status, err.value.param, err.value.message) == (400, "messages", f"messages[3].{why}")


def test_a_message_becomes_the_chats_with_its_tool_calls_and_tool_name():
    calls = [{"function": {"name": "a"}}, {"function": {"name": "b", "arguments": {"x": 1}}}]
    assert requests.openai_message(0, Message(role="assistant", content="", tool_calls=calls)) == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "a", "arguments": "{}"}},
            {"id": "call_1", "type": "function", "function": {"name": "b", "arguments": '{"x": 1}'}},
        ],
    }
    assert requests.openai_message(1, Message(role="tool", content="7", tool_name="a")) == {
        "role": "tool",
        "content": "7",
        "name": "a",
    }
    assert requests.openai_message(2, Message(role="user", content="hi")) == {"role": "user", "content": "hi"}
