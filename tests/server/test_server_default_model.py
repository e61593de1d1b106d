"""The real default model through a live `tinyllm serve`, with the openai SDK and LangChain: forced tool calls
always parse and validate (whole and streamed), auto answers in OpenAI's shape whichever way the model goes, a
conversation carries a tool result to a prose answer, and the SDK's Responses stream helper gets its final
response. The server keeps its keys and values in the 8-bit KV format (--kv-dtype q8_0), as a user serving long
contexts would."""

import json

import jsonschema
import openai
import pytest

from helpers.live_server import serve

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather.", "parameters": WEATHER}}
]
QUESTION = [{"role": "user", "content": "What is the weather like in Paris today?"}]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def port():
    with serve(
        "--max-num-seqs", "4", "--kv-memory-gb", "0.1", "--served-model-name", "smol", "--kv-dtype", "q8_0"
    ) as port:
        yield port


@pytest.fixture(scope="module")
def client(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=300)


def test_required_calls_validate_whole_and_streamed(client):
    kw = dict(model="smol", messages=QUESTION, tools=TOOLS, tool_choice="required", max_tokens=80, n=3)
    whole = client.chat.completions.create(**kw, seed=0, temperature=0.9)
    for choice in whole.choices:
        assert choice.finish_reason == "tool_calls"
        jsonschema.validate(json.loads(choice.message.tool_calls[0].function.arguments), WEATHER)
    with client.chat.completions.stream(**{**kw, "n": 1}, seed=0, temperature=0.9) as stream:
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.arguments == whole.choices[0].message.tool_calls[0].function.arguments


def test_auto_answers_in_openai_shape(client):
    r = client.chat.completions.create(model="smol", messages=QUESTION, tools=TOOLS, max_tokens=60, seed=0)
    choice = r.choices[0]
    if choice.message.tool_calls:  # the model chose to call
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls[0].function.name == "get_weather"
        json.loads(choice.message.tool_calls[0].function.arguments)
    else:
        assert choice.message.content and choice.finish_reason in ("stop", "length")


def test_a_tool_result_leads_to_a_prose_answer(client):
    first = client.chat.completions.create(
        model="smol", messages=QUESTION, tools=TOOLS, tool_choice="required", max_tokens=80, seed=1, temperature=0
    )
    message = first.choices[0].message
    result = {
        "role": "tool",
        "tool_call_id": message.tool_calls[0].id,
        "content": '{"temperature": 21, "sky": "clear"}',
    }
    messages = [*QUESTION, message.model_dump(exclude_none=True), result]
    answer = client.chat.completions.create(
        model="smol", messages=messages, tools=TOOLS, tool_choice="none", max_tokens=40, temperature=0
    )
    assert answer.choices[0].message.content and answer.choices[0].message.tool_calls is None


def test_langchain_bind_tools_on_the_default_model(port):
    langchain_openai = pytest.importorskip("langchain_openai")
    model = langchain_openai.ChatOpenAI(
        model="smol", base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, max_tokens=80, temperature=0
    )
    reply = model.bind_tools(TOOLS, tool_choice="get_weather").invoke("Weather in Oslo?")
    [call] = reply.tool_calls
    assert call["name"] == "get_weather"
    jsonschema.validate(call["args"], WEATHER)


def test_responses_stream_helper_on_the_default_model(client):
    kw = dict(model="smol", input="What is the capital of France?", max_output_tokens=60, temperature=0)
    whole = client.responses.create(**kw)
    with client.responses.stream(**kw) as stream:
        final = stream.get_final_response()
    assert final.status == whole.status == "completed"
    assert final.output_text == whole.output_text and "Paris" in whole.output_text
