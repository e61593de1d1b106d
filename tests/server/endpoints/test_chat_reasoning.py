"""Reasoning on /v1/chat/completions with the openai SDK: a tiny scripted model with Qwen3's markers and template
writes a think span; the answer comes back as `content`, the thinking as `reasoning_content` (whole and streamed,
the same text), usage counts the reasoning tokens; a reply cut inside the span is all reasoning; enable_thinking
false renders the template's empty span; a model that does not reason refuses thinking and ignores "off"."""

import openai
import pytest

from helpers.reasoning_model import scripted_llm, write_reasoning_tokenizer
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread
from tinyllm.text.tokenizer import Tokenizer

MODEL = "tiny-qwen3"
CHAT = [{"role": "user", "content": "2+2?"}]
REPLY = "<think>\nI add two and two.\n</think>\n\nIt is 4."


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen3-tok")
    write_reasoning_tokenizer(str(folder))
    return Tokenizer.from_hf_folder(folder)


def serve(llm):
    return ServerThread(create_app(llm, served_model_name=MODEL, num_blocks=64))


@pytest.fixture(scope="module")
def client(tokenizer, one_thread):
    with serve(scripted_llm(tokenizer, CHAT, REPLY)) as srv:
        yield openai.OpenAI(base_url=f"{srv.wait_ready().url}/v1", api_key="x", max_retries=0, timeout=60)


def test_the_think_span_comes_back_apart_from_the_answer(client, tokenizer):
    r = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=40)
    message = r.choices[0].message
    assert message.content == "It is 4." and message.reasoning_content == "I add two and two."
    assert r.choices[0].finish_reason == "stop"
    through_close = REPLY.index("</think>") + len("</think>")
    expected = len(tokenizer.encode(REPLY[:through_close], add_special_tokens=False))
    assert r.usage.completion_tokens_details.reasoning_tokens == expected


def test_streamed_reasoning_and_answer_equal_the_whole_ones(client):
    chunks = list(client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=40, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
    answer = "".join(d.content or "" for d in deltas)
    assert (reasoning, answer) == ("I add two and two.", "It is 4.")
    assert all("<" not in (d.content or "") + (getattr(d, "reasoning_content", None) or "") for d in deltas)


def test_a_reply_cut_inside_the_span_is_all_reasoning(client):
    r = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=6)
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "length"
    assert message.content == "" and message.reasoning_content == "I ad"  # <think> \n I " " a d
    assert r.usage.completion_tokens_details.reasoning_tokens == r.usage.completion_tokens == 6


def test_thinking_off_renders_the_empty_span_and_the_reply_is_all_answer(tokenizer, one_thread):
    off = {"enable_thinking": False}
    with serve(scripted_llm(tokenizer, CHAT, "It is 4.", off)) as srv:
        client = openai.OpenAI(base_url=f"{srv.wait_ready().url}/v1", api_key="x", max_retries=0)
        for extra in ({"chat_template_kwargs": off}, {"reasoning_effort": "none"}):
            r = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=20, extra_body=extra)
            message = r.choices[0].message
            assert message.content == "It is 4." and getattr(message, "reasoning_content", None) is None
            assert r.usage.completion_tokens_details.reasoning_tokens == 0


def test_a_bad_switch_is_a_400_naming_it(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=CHAT, extra_body={"reasoning_effort": "huge"})
    assert info.value.body["param"] == "reasoning_effort"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=CHAT, extra_body={"chat_template_kwargs": {"x": 1}})
    assert info.value.body["param"] == "chat_template_kwargs"


def test_a_model_that_does_not_reason_refuses_thinking_and_ignores_off(tmp_path, one_thread):
    from helpers.model_files import tiny_tokenizer_json

    tiny_tokenizer_json(str(tmp_path))
    plain = Tokenizer.from_hf_folder(tmp_path)
    assert plain.reasoning is None
    with serve(scripted_llm(plain, CHAT, "4")) as srv:
        client = openai.OpenAI(base_url=f"{srv.wait_ready().url}/v1", api_key="x", max_retries=0)
        for extra in ({"reasoning_effort": "low"}, {"chat_template_kwargs": {"enable_thinking": True}}):
            with pytest.raises(openai.BadRequestError) as info:
                client.chat.completions.create(model=MODEL, messages=CHAT, extra_body=extra)
            assert "does not reason" in info.value.body["message"]
        r = client.chat.completions.create(model=MODEL, messages=CHAT, extra_body={"reasoning_effort": "none"})
        assert r.choices[0].message.content == "4" and r.usage.completion_tokens_details is None
        assert "reasoning_content" not in r.choices[0].message.model_extra


@pytest.mark.slow  # three answers (whole, streamed, the SDK helper)
def test_responses_put_a_reasoning_item_before_the_message(client):
    r = client.responses.create(model=MODEL, input=CHAT[0]["content"], max_output_tokens=40)
    kinds = [item.type for item in r.output]
    assert kinds == ["reasoning", "message"] and r.output_text == "It is 4."
    assert r.output[0].content[0].text == "I add two and two."
    assert r.usage.output_tokens_details.reasoning_tokens > 0
    events = list(client.responses.create(model=MODEL, input=CHAT[0]["content"], max_output_tokens=40, stream=True))
    thinking = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    answer = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert (thinking, answer) == ("I add two and two.", "It is 4.")
    assert [i.type for i in events[-1].response.output] == ["reasoning", "message"]
    added = [(e.output_index, e.item.type) for e in events if e.type == "response.output_item.added"]
    assert added == [(0, "reasoning"), (1, "message")]
    first_answer = next(i for i, e in enumerate(events) if e.type == "response.output_text.delta")
    assert all(e.type != "response.reasoning_text.delta" for e in events[first_answer:])
    with client.responses.stream(model=MODEL, input=CHAT[0]["content"], max_output_tokens=40) as s:
        final = s.get_final_response()  # the SDK's helper rebuilds the response from the events
    assert final.output_text == "It is 4." and final.output[0].content[0].text == "I add two and two."


def test_stop_strings_match_the_answer_only(client):
    r = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=40, stop=["two"])
    assert r.choices[0].message.content == "It is 4." and r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.reasoning_content == "I add two and two."  # "two" there does not stop it
    r = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=40, stop=[" is"])
    assert r.choices[0].message.content == "It" and r.choices[0].finish_reason == "stop"
