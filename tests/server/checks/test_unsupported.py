"""Fields the server does not honour are a 400 naming the field (never a 200 that ignored them), through the
official openai client; their neutral values and harmless fields are accepted."""

import openai
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.checks.unsupported import CHAT_FIELDS, COMPLETION_FIELDS
from tinyllm.server.transport.server_thread import ServerThread

MODEL = "tiny"
CHAT = [{"role": "user", "content": "Tell me about rivers."}]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}


@pytest.fixture(scope="module")
def client(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(0, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=256), smollm_tokenizer
    )
    with ServerThread(create_app(llm, served_model_name=MODEL, num_blocks=64)) as srv:
        yield openai.OpenAI(base_url=f"{srv.wait_ready().url}/v1", api_key="x", max_retries=0, timeout=60)


def chat(client, **kw):
    return client.chat.completions.create(model=MODEL, messages=kw.pop("messages", CHAT), max_tokens=2, **kw)


def complete(client, **kw):
    return client.completions.create(model=MODEL, prompt="Rivers", max_tokens=2, **kw)


@pytest.mark.parametrize(
    "field, value",
    [
        ("functions", [TOOL["function"]]),
        ("function_call", "auto"),
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("modalities", ["text", "audio"]),
        ("prediction", {"type": "content", "content": "x"}),
        ("store", True),
        ("service_tier", "priority"),
        ("web_search_options", {}),
        ("verbosity", "low"),
    ],
)
def test_openai_chat_fields_not_honoured_are_400_naming_the_field(client, field, value):
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, **{field: value})
    body = info.value.body
    assert info.value.status_code == 400 and body["param"] == field
    assert body["message"].startswith(f"{field} is not supported")


@pytest.mark.parametrize(
    "field, value",
    [
        ("regex", "[0-9]+"),
        ("guided_decoding_backend", "xgrammar"),
        ("min_tokens", 3),
        ("use_beam_search", True),
        ("prompt_logprobs", 1),
        ("echo", True),
        ("chat_template", "{{ messages }}"),
        ("add_generation_prompt", False),
        ("skip_special_tokens", False),
    ],
)
def test_other_servers_extras_that_change_the_answer_are_400(client, field, value):
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, extra_body={field: value})
    assert info.value.body["param"] == field


@pytest.mark.parametrize(
    "field, value",
    [
        ("suffix", " and lakes."),
        ("best_of", 3),
    ],
)
def test_completion_fields_not_honoured_are_400(client, field, value):
    with pytest.raises(openai.BadRequestError) as info:
        complete(client, **{field: value})
    assert info.value.body["param"] == field and "not supported" in info.value.body["message"]


def test_neutral_values_and_harmless_fields_are_accepted(client):
    r = chat(
        client,
        seed=1,
        response_format={"type": "text"},
        tools=[],
        tool_choice="none",
        store=False,
        modalities=["text"],
        user="u1",
        metadata={"k": "v"},
        service_tier="auto",
        parallel_tool_calls=True,
        extra_body={"some_unknown_extra": 1, "min_tokens": 0},
    )
    plain = chat(client, seed=1)
    assert r.choices[0].message.content == plain.choices[0].message.content
    c = complete(client, seed=1, best_of=1, echo=False, suffix="", logit_bias={})
    assert c.choices[0].text == complete(client, seed=1).choices[0].text
    assert complete(client, n=2, best_of=2, seed=1).choices[1].index == 1


def test_tables_never_raise_on_odd_values():
    # Any JSON value of any listed field is judged without raising (the server then answers 400 or 200).
    for table in (CHAT_FIELDS, COMPLETION_FIELDS):
        for entry in table.values():
            for value in (0, 1.5, "x", [], {}, True, [1], {"type": 1}):
                assert entry.is_neutral(value, {"n": "2"}) in (True, False)


@pytest.mark.parametrize("field, value", [("function_call", {"name": "f"}), ("audio", {"id": "a1"})])
def test_a_messages_own_unsupported_field_is_a_400_naming_the_message(field, value):
    from tinyllm.server.checks.unsupported import check_supported
    from tinyllm.server.wire.errors import APIError
    from tinyllm.server.wire.protocol import ChatCompletionRequest

    messages = [*CHAT, {"role": "assistant", "content": "ok"}, {"role": "assistant", "content": "", field: value}]
    with pytest.raises(APIError) as err:
        check_supported(ChatCompletionRequest.model_validate({"messages": messages}), CHAT_FIELDS)
    assert err.value.status == 400 and err.value.param == "messages"
    assert err.value.message == f"messages[2].{field} is not supported by this server; send nothing or leave it out"
    messages[2][field] = None  # null: not set
    check_supported(ChatCompletionRequest.model_validate({"messages": messages}), CHAT_FIELDS)
