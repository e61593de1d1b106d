"""LangChain's ChatOpenAI against the server, as its users call it: bind_tools (forced and named), a tool
result fed back, and with_structured_output by JSON schema and by function calling. A tiny random model
with the default model's tokenizer: only the constraints make its answers right, which is what is tested."""

import pytest
from pydantic import BaseModel, Field

from helpers.live_server import tiny_llm
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

langchain_openai = pytest.importorskip("langchain_openai")
messages = pytest.importorskip("langchain_core.messages")

MODEL = "tiny"


class GetWeather(BaseModel):
    """The weather in a city."""

    city: str = Field(pattern="^[A-Z][a-z]{2,9}$")
    days: int = Field(ge=1, le=7)


class Person(BaseModel):
    name: str = Field(pattern="^[A-Z][a-z]{1,8}$")
    age: int = Field(ge=0, le=120)


@pytest.fixture(scope="module")
def chat_model(smollm_tokenizer, one_thread):
    llm = tiny_llm(smollm_tokenizer)
    with ServerThread(create_app(llm, served_model_name=MODEL, num_blocks=512)) as srv:
        yield langchain_openai.ChatOpenAI(
            model=MODEL, base_url=f"{srv.wait_ready().url}/v1", api_key="x", max_retries=0, max_tokens=120, seed=1
        )


@pytest.mark.parametrize("tool_choice", ["any", "GetWeather"])
def test_bind_tools_yields_calls_with_valid_arguments(chat_model, tool_choice):
    bound = chat_model.bind_tools([GetWeather], tool_choice=tool_choice)
    reply = bound.invoke("What is the weather in Paris for three days?")
    [call] = reply.tool_calls
    assert call["name"] == "GetWeather" and call["id"].startswith("call_")
    GetWeather.model_validate(call["args"])
    assert reply.response_metadata["finish_reason"] == "tool_calls"


def test_a_tool_result_goes_back_through_langchain(chat_model):
    question = messages.HumanMessage("What is the weather in Paris?")
    reply = chat_model.bind_tools([GetWeather], tool_choice="GetWeather").invoke([question])
    result = messages.ToolMessage("Sunny, 21 degrees.", tool_call_id=reply.tool_calls[0]["id"])
    answer = chat_model.bind_tools([GetWeather]).invoke([question, reply, result])
    assert isinstance(answer.content, str) and answer.content and not answer.tool_calls


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_with_structured_output_returns_the_model(chat_model, method):
    structured = chat_model.with_structured_output(Person, method=method)
    person = structured.invoke("Make up a person.")
    assert isinstance(person, Person)


def test_bind_tools_streams(chat_model):
    bound = chat_model.bind_tools([GetWeather], tool_choice="any")
    chunks = list(bound.stream("Weather in Rome?"))
    message = chunks[0]
    for chunk in chunks[1:]:
        message = message + chunk
    [call] = message.tool_calls
    GetWeather.model_validate(call["args"])
