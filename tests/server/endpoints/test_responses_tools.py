"""Function tools on /v1/responses with the official openai client: a call comes back as a function_call output
item (whole and streamed), the same call the chat's tool_calls give for the same conversation; a call and its
output sent back as input items make the prompt the chat's assistant tool_calls and tool message make;
tool_choice required holds the answer to a call; tools of other kinds are a 400. A bigram model scripted to call
`weather`, as tests/server/test_ollama.py's."""

import json

import openai
import pytest

from helpers.bigram_model import scripted_llama
from helpers.live_server import tiny_llm
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

MODEL = "tiny"
CALL = '<tool_call>\n\n{"name":"weather","arguments": {"city": "Paris"}}'
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
FLAT = {"type": "function", "name": "weather", "description": "The weather in a city.", "parameters": PARAMETERS}
NESTED = {"type": "function", "function": {k: v for k, v in FLAT.items() if k != "type"}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def client_of(llm):
    srv = ServerThread(create_app(llm, served_model_name=MODEL, num_blocks=256))
    srv.__enter__()
    return srv, openai.OpenAI(base_url=f"{srv.wait_ready().url}/v1", api_key="x", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def caller(smollm_tokenizer, one_thread):
    newline = smollm_tokenizer.encode("\n", add_special_tokens=False)[-1]  # the chat template's last token
    model = scripted_llama(smollm_tokenizer, CALL, after=newline, max_position_embeddings=1024)
    srv, client = client_of(LLM.from_parts(model, smollm_tokenizer))
    yield client
    srv.__exit__(None, None, None)


@pytest.fixture(scope="module")
def randomly(smollm_tokenizer, one_thread):
    srv, client = client_of(tiny_llm(smollm_tokenizer))
    yield client
    srv.__exit__(None, None, None)


def test_a_call_is_a_function_call_item_as_the_chats_tool_call(caller):
    r = caller.responses.create(model=MODEL, input=ASK, tools=[FLAT], temperature=0)
    [item] = r.output
    assert item.type == "function_call" and item.name == "weather" and json.loads(item.arguments) == {"city": "Paris"}
    assert item.call_id.startswith("call_") and item.status == "completed" and r.status == "completed"
    assert r.tool_choice == "auto" and r.tools[0].name == "weather"
    chat = caller.chat.completions.create(model=MODEL, messages=ASK, tools=[NESTED], temperature=0).choices[0]
    [call] = chat.message.tool_calls
    assert (call.function.name, call.function.arguments) == (item.name, item.arguments)
    assert r.usage.input_tokens == chat_usage(caller, ASK)


def chat_usage(client, messages) -> int:
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=[NESTED], max_tokens=1, temperature=0)
    return r.usage.prompt_tokens


def test_a_streamed_call_arrives_as_its_items_events(caller):
    with caller.responses.stream(model=MODEL, input=ASK, tools=[FLAT], temperature=0) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    [item] = final.output
    assert item.type == "function_call" and json.loads(item.arguments) == {"city": "Paris"}
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[3:] == [
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_a_call_and_its_output_sent_back_make_the_chats_prompt(caller):
    call = {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city": "Paris"}'}
    output = {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"}
    r = caller.responses.create(model=MODEL, input=[*ASK, call, output], tools=[FLAT], max_output_tokens=1)
    chat = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"},
    ]  # fmt: skip
    assert r.usage.input_tokens == chat_usage(caller, chat)


def test_tool_choice_required_holds_a_random_model_to_a_call(randomly):
    short = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
    tool = {**FLAT, "parameters": short}  # a random model's free string would run past max_output_tokens
    r = randomly.responses.create(model=MODEL, input=ASK, tools=[tool], tool_choice="required", temperature=0.7)
    [item] = [o for o in r.output if o.type == "function_call"]
    assert item.name == "weather" and isinstance(json.loads(item.arguments)["city"], str)
    named = {"type": "function", "name": "weather"}
    r = randomly.responses.create(model=MODEL, input=ASK, tools=[tool], tool_choice=named, temperature=0.7)
    assert [o.name for o in r.output if o.type == "function_call"] == ["weather"]


@pytest.mark.parametrize(
    "tools, words",
    [
        ([{"type": "web_search"}], "function tools only"),
        ([{"type": "function", "name": "bad name!", "parameters": PARAMETERS}], "tools"),
    ],
)
def test_tools_of_other_kinds_and_bad_functions_are_400s(randomly, tools, words):
    with pytest.raises(openai.BadRequestError) as info:
        randomly.responses.create(model=MODEL, input=ASK, tools=tools, max_output_tokens=2)
    assert info.value.body["param"] == "tools" and words in info.value.body["message"]
