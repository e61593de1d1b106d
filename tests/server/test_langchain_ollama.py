"""LangChain's ChatOllama and OllamaEmbeddings against the server's Ollama routes, as their users call them: invoke,
stream (with the usage it reports), structured output by JSON schema, tool calls, embeddings. A tiny random model
with the default model's tokenizer; the tool call comes from a bigram model scripted to write one."""

import pytest
import torch
from pydantic import BaseModel, Field

from helpers.bigram_model import scripted_llama
from helpers.live_server import tiny_llm
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

langchain_ollama = pytest.importorskip("langchain_ollama")

MODEL = "tiny"
CALL = '<tool_call>\n\n{"name":"weather","arguments": {"city": "Paris"}}'


class Person(BaseModel):
    name: str = Field(pattern="^[A-Z][a-z]{1,8}$")
    age: int = Field(ge=0, le=120)


class weather(BaseModel):  # lower case: the tool is named after the class
    """The weather in a city."""

    city: str


@pytest.fixture(scope="module")
def llm(smollm_tokenizer, one_thread):
    return tiny_llm(smollm_tokenizer)


@pytest.fixture(scope="module")
def url(llm):
    with ServerThread(create_app(llm, served_model_name=MODEL, num_blocks=512)) as srv:
        yield srv.wait_ready().url


def chat(url: str, **options):
    return langchain_ollama.ChatOllama(model=MODEL, base_url=url, validate_model_on_init=True, **options)


def test_invoke_and_stream_give_the_same_text_and_usage(url):
    model = chat(url, seed=4, num_predict=10, temperature=0.7)
    reply = model.invoke("Tell me a story.")
    assert reply.response_metadata["done_reason"] == "length" and reply.usage_metadata["output_tokens"] == 10
    chunks = list(model.stream("Tell me a story."))
    joined = chunks[0]
    for c in chunks[1:]:
        joined = joined + c
    assert joined.content == reply.content
    assert joined.usage_metadata == reply.usage_metadata


def test_structured_output_by_json_schema_returns_the_model(url):
    person = chat(url, seed=1, num_predict=60).with_structured_output(Person, method="json_schema")
    assert isinstance(person.invoke("Make up a person."), Person)


def test_the_options_langchain_users_set_are_served(url):
    """num_ctx past the model's context, the runner's num_thread, a penalty window and mirostat off."""
    model = chat(url, num_ctx=16384, num_thread=4, repeat_last_n=64, mirostat=0, num_predict=3, seed=2)
    assert model.invoke("Hi").usage_metadata["output_tokens"] == 3


def test_a_bad_option_value_fails_loudly(url):
    with pytest.raises(Exception, match=r"options.mirostat must be 0 \(off\), 1 or 2, got 3"):
        chat(url, mirostat=3).invoke("Hi")


def test_bind_tools_reads_the_models_call(smollm_tokenizer):
    newline = smollm_tokenizer.encode("\n", add_special_tokens=False)[-1]
    model = scripted_llama(smollm_tokenizer, CALL, after=newline, max_position_embeddings=1024)
    with ServerThread(create_app(LLM.from_parts(model, smollm_tokenizer), served_model_name=MODEL)) as srv:
        bound = chat(srv.wait_ready().url).bind_tools([weather])
        [call] = bound.invoke("Weather in Paris?").tool_calls
        assert (call["name"], call["args"]) == ("weather", {"city": "Paris"})
        streamed = [c for chunk in bound.stream("Weather in Paris?") for c in chunk.tool_calls]
        assert [(c["name"], c["args"]) for c in streamed] == [("weather", {"city": "Paris"})]


def test_ollama_embeddings_are_the_llms(url, llm):
    embeddings = langchain_ollama.OllamaEmbeddings(model=MODEL, base_url=url)
    texts = ["a first document", "another one"]
    torch.testing.assert_close(torch.tensor(embeddings.embed_documents(texts)), llm.embed(texts), atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.tensor(embeddings.embed_query("q")), llm.embed("q"), atol=1e-5, rtol=0)
