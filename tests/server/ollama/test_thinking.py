"""Ollama's `think` with the `ollama` client, on a tiny scripted model with Qwen3's markers and template: the think
span comes back as message.thinking (chat) and thinking (generate), whole and streamed, apart from the answer; a
past turn's `thinking` reaches the template as its reasoning; a model that does not reason still refuses think."""

import pytest

from helpers.reasoning_model import CHAT, thinking_llm
from tinyllm.server import create_app
from tinyllm.server.ollama.protocol import Message
from tinyllm.server.ollama.requests import openai_message
from tinyllm.server.transport.server_thread import ServerThread

ollama = pytest.importorskip("ollama")

MODEL = "tiny-qwen3"


@pytest.fixture(scope="module")
def url(tmp_path_factory, one_thread):
    llm = thinking_llm(tmp_path_factory)
    with ServerThread(create_app(llm, served_model_name=MODEL, num_blocks=64)) as srv:
        yield srv.wait_ready().url


@pytest.fixture(scope="module")
def client(url):
    return ollama.Client(host=url)


def test_chat_think_gives_the_thinking_apart(client):
    r = client.chat(model=MODEL, messages=CHAT, think=True, options={"num_predict": 40})
    assert r.message.thinking == "I add two and two." and r.message.content == "It is 4."


def test_a_streamed_chat_is_the_whole_thinking_and_answer_in_pieces(client):
    parts = list(client.chat(model=MODEL, messages=CHAT, think=True, stream=True, options={"num_predict": 40}))
    thinking = "".join(p.message.thinking or "" for p in parts)
    answer = "".join(p.message.content or "" for p in parts)
    assert (thinking, answer) == ("I add two and two.", "It is 4.") and parts[-1].done


def test_generate_think_gives_the_thinking_apart(client):
    r = client.generate(model=MODEL, prompt="2+2?", think=True, options={"num_predict": 40})
    assert r.thinking == "I add two and two." and r.response == "It is 4."
    parts = list(client.generate(model=MODEL, prompt="2+2?", think=True, stream=True, options={"num_predict": 40}))
    assert "".join(p.thinking or "" for p in parts) == "I add two and two."
    assert "".join(p.response for p in parts) == "It is 4."


def test_a_past_turns_thinking_is_its_reasoning_for_a_model_that_reasons():
    past = Message(role="assistant", content="4", thinking="I add.")
    assert openai_message(1, past, reasons=True) == {"role": "assistant", "content": "4", "reasoning_content": "I add."}


@pytest.mark.slow  # importing LangChain
def test_langchain_chat_ollama_puts_the_thinking_in_reasoning_content(url):
    langchain_ollama = pytest.importorskip("langchain_ollama")
    chat = langchain_ollama.ChatOllama(model=MODEL, base_url=url, reasoning=True, num_predict=40)
    message = chat.invoke(CHAT[0]["content"])
    assert message.content == "It is 4." and message.additional_kwargs["reasoning_content"] == "I add two and two."
