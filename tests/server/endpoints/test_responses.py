"""/v1/responses with the official openai client: text and message input, instructions, max_output_tokens,
sampling fields; the streamed events assemble (the SDK's stream helper) to the same text as the whole
answer, which equals the chat completion of the same conversation; fields it does not honour are 400s."""

import openai
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

MODEL = "tiny"


@pytest.fixture(scope="module")
def client(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(3, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=512), smollm_tokenizer
    )
    with ServerThread(create_app(llm, served_model_name=MODEL, num_blocks=256)) as srv:
        yield openai.OpenAI(base_url=f"{srv.wait_ready().url}/v1", api_key="x", max_retries=0, timeout=120)


def greedy_chat(client, messages, max_tokens):
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens, temperature=0)
    return r.choices[0]


def test_text_input_with_instructions_equals_the_chat_answer(client):
    r = client.responses.create(
        model=MODEL, input="Name a river.", instructions="Answer briefly.", max_output_tokens=12, temperature=0
    )
    chat = greedy_chat(
        client, [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a river."}], 12
    )
    assert r.output_text == chat.message.content and r.output_text
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 12 and r.instructions == "Answer briefly." and r.max_output_tokens == 12


def test_message_input_and_usage(client):
    conversation = [
        {"role": "developer", "content": "Be terse."},
        {"role": "user", "content": [{"type": "input_text", "text": "Hello"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi."}]},
        {"role": "user", "content": "Name a lake."},
    ]
    r = client.responses.create(model=MODEL, input=conversation, max_output_tokens=8, temperature=0)
    as_chat = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Name a lake."},
    ]
    chat = client.chat.completions.create(model=MODEL, messages=as_chat, max_tokens=8, temperature=0)
    assert r.output_text == chat.choices[0].message.content
    assert (r.usage.input_tokens, r.usage.output_tokens) == (chat.usage.prompt_tokens, chat.usage.completion_tokens)
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.output[0].role == "assistant" and r.output[0].type == "message" and r.id.startswith("resp_")


def test_stream_helper_assembles_the_same_text(client):
    # Cut by max_output_tokens, the stream ends with response.incomplete (get_final_response wants a
    # response.completed, which the default-model test gets), carrying the response as the helper built it.
    kw = dict(model=MODEL, input="Tell me about lakes.", max_output_tokens=20, temperature=0)
    whole = client.responses.create(**kw)
    with client.responses.stream(**kw) as stream:
        events = list(stream)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    last = events[-1]
    assert last.type == "response.incomplete" and last.response.usage.output_tokens == 20
    assert deltas == last.response.output_text == whole.output_text and deltas


def test_raw_stream_events_come_in_order(client):
    events = list(client.responses.create(model=MODEL, input="Hi", max_output_tokens=3, temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_sampling_is_reproducible_only_through_temperature_zero(client):
    a = client.responses.create(model=MODEL, input="Hi", max_output_tokens=6, temperature=0, top_p=0.5)
    b = client.responses.create(model=MODEL, input="Hi", max_output_tokens=6, temperature=0)
    assert a.output_text == b.output_text and a.top_p == 0.5 and a.temperature == 0


@pytest.mark.parametrize(
    "field, value",
    [
        ("previous_response_id", "resp_1"),
        ("reasoning", {"effort": "low"}),
        ("store", True),
        ("text", {"format": {"type": "json_object"}}),
        ("top_logprobs", 2),
        ("some_unknown_field", 1),
    ],
)
def test_fields_not_honoured_are_400_naming_them(client, field, value):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="Hi", max_output_tokens=2, extra_body={field: value})
    assert info.value.body["param"] == field and "not supported" in info.value.body["message"]


@pytest.mark.parametrize(
    "input_, words",
    [
        ([], "empty"),
        ([{"type": "function_call_output", "call_id": 5, "output": "x"}], "function_call_output"),
        ([{"type": "function_call", "name": "f", "arguments": {}}], "function_call"),
        ([{"type": "reasoning", "summary": []}], "function_call_output"),
        ([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}], "input_text"),
    ],
)
def test_bad_input_is_400(client, input_, words):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input=input_, max_output_tokens=2)
    assert info.value.body["param"] == "input" and words in info.value.body["message"]


def test_neutral_values_are_accepted(client):
    r = client.responses.create(
        model=MODEL,
        input="Hi",
        max_output_tokens=2,
        temperature=0,
        store=False,
        metadata={"k": "v"},
        user="u",
        truncation="disabled",
        text={"format": {"type": "text"}},
    )
    assert (
        r.output_text
        == client.responses.create(model=MODEL, input="Hi", max_output_tokens=2, temperature=0).output_text
    )


@pytest.mark.parametrize("value, words", [(0, "must be None or an integer >= 1"), (100_000, "context")])
def test_max_output_tokens_errors_name_it(client, value, words):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="Hi", max_output_tokens=value)
    message = info.value.body["message"]
    assert info.value.body["param"] == "max_output_tokens" and words in message
    assert "max_output_tokens" in message and "max_tokens" not in message.replace("max_output_tokens", "")


def test_routes_without_the_v1_prefix(client):
    bare = openai.OpenAI(base_url=str(client.base_url).removesuffix("/v1/"), api_key="x", max_retries=0, timeout=120)
    kw = dict(model=MODEL, input="Hi", max_output_tokens=4, temperature=0)
    assert bare.responses.create(**kw).output_text == client.responses.create(**kw).output_text
