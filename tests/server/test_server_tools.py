"""Tool calling over HTTP with the official openai client, on a tiny random model with the default model's
tokenizer and chat template (which knows nothing of tools, so tinyllm writes them into the system prompt):
required and named always give a parseable call whose arguments validate, streamed equals whole, the SDK's
stream helper assembles the deltas, tool results feed back, and bad tool definitions are 400s naming them."""

import json

import httpx
import jsonschema
import openai
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

MODEL = "tiny"
CHAT = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Z][a-z]{2,9}$"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"enum": ["UTC", "CET"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}


@pytest.fixture(scope="module")
def server(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(7, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=1024), smollm_tokenizer
    )
    with ServerThread(create_app(llm, served_model_name=MODEL, num_blocks=512)) as srv:
        yield srv.wait_ready().url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="x", max_retries=0, timeout=120)


def chat(client, **kw):
    kw.setdefault("max_tokens", 120)
    return client.chat.completions.create(model=MODEL, messages=kw.pop("messages", CHAT), tools=TOOLS, **kw)


def assert_valid_call(call, names=("get_weather", "get_time")):
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name in names
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_required_always_yields_a_valid_call(client):
    r = chat(client, tool_choice="required", seed=0, n=6, temperature=1.3)
    for choice in r.choices:
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None and len(choice.message.tool_calls) == 1
        assert_valid_call(choice.message.tool_calls[0])


def test_named_function_is_the_one_called(client):
    named = {"type": "function", "function": {"name": "get_time"}}
    r = chat(client, tool_choice=named, seed=1, n=4, temperature=1.3)
    for choice in r.choices:
        assert choice.finish_reason == "tool_calls"
        assert_valid_call(choice.message.tool_calls[0], names=("get_time",))


def _streamed(client, **kw):
    """Content, calls (name, arguments) and finish reason per choice, assembled from raw chunks."""
    out = {}
    for chunk in chat(client, stream=True, **kw):
        for c in chunk.choices:
            entry = out.setdefault(c.index, {"content": "", "calls": {}, "finish": None})
            entry["content"] += c.delta.content or ""
            for d in c.delta.tool_calls or ():
                call = entry["calls"].setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = d.id or call["id"]
                call["name"] += (d.function.name or "") if d.function else ""
                call["arguments"] += (d.function.arguments or "") if d.function else ""
            entry["finish"] = c.finish_reason or entry["finish"]
    return out


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_streamed_calls_equal_whole_calls(client, tool_choice):
    whole = chat(client, tool_choice=tool_choice, seed=2, n=3, temperature=1.2)
    streamed = _streamed(client, tool_choice=tool_choice, seed=2, n=3, temperature=1.2)
    for choice in whole.choices:
        got = streamed[choice.index]
        assert got["finish"] == "tool_calls" and got["content"] == ""
        [call] = got["calls"].values()
        assert call["id"].startswith("call_")
        expected = choice.message.tool_calls[0].function
        assert (call["name"], call["arguments"]) == (expected.name, expected.arguments)


def test_sdk_stream_helper_assembles_tool_calls(client):
    with client.chat.completions.stream(
        model=MODEL, messages=CHAT, tools=TOOLS, tool_choice="required", max_tokens=120, seed=5
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert_valid_call(message.tool_calls[0])


def test_auto_on_an_unconstrained_model_returns_its_text_unchanged(client):
    # The tiny random model writes no call, so auto answers prose; "none" leaves the tools out of the prompt.
    r = chat(client, tool_choice="auto", seed=3, max_tokens=20)
    plain = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=20, seed=3)
    none = chat(client, tool_choice="none", seed=3, max_tokens=20)
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason == "length"
    assert none.choices[0].message.content == plain.choices[0].message.content
    assert none.usage.prompt_tokens == plain.usage.prompt_tokens < r.usage.prompt_tokens


def test_a_tool_result_is_fed_back(client, server):
    first = chat(client, tool_choice="required", seed=4)
    call = first.choices[0].message.tool_calls[0]
    messages = [
        *CHAT,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 degrees."},
    ]
    r = chat(client, messages=messages, seed=4, max_tokens=8)
    assert r.choices[0].message.content and r.choices[0].message.tool_calls is None  # answered as prose
    # the prompt holds the call as the model wrote it and the result after it
    ids = httpx.post(f"{server}/tokenize", json={"messages": messages}).json()["tokens"]
    text = httpx.post(f"{server}/detokenize", json={"tokens": ids}).json()["prompt"]
    written = json.dumps({"name": call.function.name, "arguments": json.loads(call.function.arguments)})
    assert f"<|im_start|>assistant\n<tool_call>\n{written}\n</tool_call><|im_end|>" in text
    assert "<|im_start|>user\n<tool_response>\nSunny, 21 degrees.\n</tool_response><|im_end|>" in text


@pytest.mark.parametrize(
    "tools, tool_choice, param, words",
    [
        ([{"type": "function"}], None, "tools", 'no "function"'),
        ([{"type": "retrieval"}], None, "tools", "tools[0]"),
        ([{"type": "function", "function": {"name": "has space"}}], None, "tools", "function.name"),
        ([TOOLS[0], TOOLS[0]], None, "tools", "twice"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}], None, "tools", "object"),
        (
            [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "minProperties": "x"}}}],
            None,
            "tools",
            "JSON schema",
        ),
        (TOOLS, "sometimes", "tool_choice", "sometimes"),
        (TOOLS, {"type": "function", "function": {"name": "nope"}}, "tool_choice", "nope"),
        (None, "required", "tool_choice", "needs tools"),
    ],
)
def test_bad_tool_requests_are_400_naming_the_problem(client, tools, tool_choice, param, words):
    kw = {k: v for k, v in (("tools", tools), ("tool_choice", tool_choice)) if v is not None}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2, **kw)
    assert info.value.body["param"] == param and words in info.value.body["message"]


def test_response_format_with_a_forced_call_is_400(client):
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, tool_choice="required", response_format={"type": "json_object"})
    assert info.value.body["param"] == "response_format"
