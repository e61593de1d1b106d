"""Ollama's API driven by the official `ollama` Python client (and raw HTTP where the client hides the wire): chat
and generate, whole and streamed, their counts and times, format, tools, options mapped or refused, embeddings,
the model routes, and the same seeded request giving the same text as the OpenAI routes. A tiny random model
with the default model's tokenizer; tool calls come from a bigram model scripted to write one."""

import json

import httpx
import jsonschema
import pytest
import torch

from helpers.bigram_model import scripted_llama
from helpers.live_server import tiny_llm
from tinyllm import LLM, SamplingParams
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

ollama = pytest.importorskip("ollama")

MODEL = "tiny"
HI = [{"role": "user", "content": "Say something."}]
CALL = '<tool_call>\n\n{"name":"weather","arguments": {"city": "Paris"}}'
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def llm(smollm_tokenizer, one_thread):
    return tiny_llm(smollm_tokenizer)


@pytest.fixture(scope="module")
def server(llm):
    with ServerThread(create_app(llm, served_model_name=MODEL, num_blocks=512)) as srv:
        yield srv.wait_ready()


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.url)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def caller(smollm_tokenizer, one_thread):
    """A client of a server whose model answers every chat with CALL."""
    newline = smollm_tokenizer.encode("\n", add_special_tokens=False)[-1]  # the chat template's last token
    model = scripted_llama(smollm_tokenizer, CALL, after=newline, max_position_embeddings=1024)
    with ServerThread(create_app(LLM.from_parts(model, smollm_tokenizer), served_model_name=MODEL)) as srv:
        yield ollama.Client(host=srv.wait_ready().url)


def prompt_tokens(http, messages, tools=None) -> int:
    body = {"messages": messages, **({"tools": tools} if tools else {})}
    return http.post("/tokenize", json=body).json()["count"]


# ---- chat


def test_chat_answers_with_real_counts_and_times(client, http):
    r = client.chat(MODEL, HI, options={"seed": 5, "num_predict": 7})
    assert r.done and r.done_reason == "length" and r.message.role == "assistant" and r.message.content
    assert r.eval_count == 7 and r.prompt_eval_count == prompt_tokens(http, HI)
    assert r.total_duration >= r.prompt_eval_duration + r.eval_duration > 0
    assert r.load_duration == 0 and r.model == MODEL


def test_a_stream_is_the_whole_answer_in_pieces(client, http):
    options = {"seed": 9, "num_predict": 12, "temperature": 0.9}
    whole = client.chat(MODEL, HI, options=options)
    parts = list(client.chat(MODEL, HI, options=options, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert (parts[-1].eval_count, parts[-1].done_reason) == (12, "length")
    with http.stream("POST", "/api/chat", json={"model": MODEL, "messages": HI, "options": options}) as r:
        assert r.headers["content-type"] == "application/x-ndjson"  # Ollama streams unless told not to
        lines = [json.loads(line) for line in r.iter_lines()]
    assert "".join(x["message"]["content"] for x in lines) == whole.message.content


def test_the_same_seeded_request_gives_the_same_text_as_the_openai_route(client, http):
    options = {"seed": 123, "temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "num_predict": 20}
    options.update(repeat_penalty=1.1, presence_penalty=0.3, frequency_penalty=0.2, stop=["\n\n"])
    ours = client.chat(MODEL, HI, options=options)
    body = dict(model=MODEL, messages=HI, seed=123, temperature=0.8, top_k=40, top_p=0.9, min_p=0.05, max_tokens=20)
    body.update(repetition_penalty=1.1, presence_penalty=0.3, frequency_penalty=0.2, stop=["\n\n"])
    openai = http.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert ours.message.content == openai["message"]["content"]
    assert ours.done_reason == openai["finish_reason"]


@pytest.mark.parametrize("version", [1, 2])
def test_mirostat_from_ollama_and_v1_samples_as_the_llm_api_does(client, http, llm, version):
    settings = dict(mirostat=version, mirostat_tau=3.0, mirostat_eta=1.0, temperature=0.3)
    ours = client.chat(MODEL, HI, options={**settings, "seed": 7, "num_predict": 10}).message.content
    body = dict(model=MODEL, messages=HI, seed=7, max_tokens=10, **settings)
    openai = http.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    params = SamplingParams(seed=7, max_tokens=10, **settings)
    assert ours == openai == llm.chat(HI, params=params).text
    assert ours != llm.chat(HI, params=params.replace(mirostat=0)).text  # the option reached the sampler


def test_mirostat_and_tfs_z_on_v1_are_checked_by_name(http):
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2, "seed": 3}
    ok = http.post("/v1/completions", json={**body, "mirostat": 2, "tfs_z": 0.9, "mirostat_eta": 0.5})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2, ok.text
    for bad, message in (
        ({"mirostat": 3}, "mirostat must be 0 (off), 1 or 2, got 3"),
        ({"mirostat_tau": -1.0}, "mirostat_tau must be a finite number > 0, got -1.0"),
        ({"tfs_z": 0}, "tfs_z must be in (0, 1], got 0.0"),
    ):
        r = http.post("/v1/completions", json={**body, **bad})
        error = r.json()["error"]
        assert r.status_code == 400 and error["message"] == message and error["param"] == next(iter(bad)), r.text


def test_format_holds_the_answer_to_a_schema_and_to_json(client, http):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "pattern": "^[A-Z][a-z]{1,8}$"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    r = client.chat(MODEL, HI, format=schema, options={"seed": 1, "num_predict": 60})
    jsonschema.validate(json.loads(r.message.content), schema)
    r = client.chat(MODEL, HI, format="json", options={"seed": 2, "num_predict": 30})
    body = {"messages": HI, "seed": 2, "max_tokens": 30, "response_format": {"type": "json_object"}}
    openai = http.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    assert r.message.content == openai and r.message.content.startswith("{")  # the same constraint


def test_a_tool_call_comes_back_as_ollama_writes_it(caller):
    r = caller.chat(MODEL, [{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER])
    [call] = r.message.tool_calls
    assert (call.function.name, dict(call.function.arguments)) == ("weather", {"city": "Paris"})
    assert r.message.content == "" and r.done_reason == "stop"
    parts = list(caller.chat(MODEL, [{"role": "user", "content": "Weather?"}], tools=[WEATHER], stream=True))
    calls = [c for p in parts for c in (p.message.tool_calls or [])]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("weather", {"city": "Paris"})]
    assert "".join(p.message.content for p in parts) == ""  # the call's text is not sent as content


def test_without_tools_the_call_is_plain_text(caller):
    r = caller.chat(MODEL, HI)
    assert r.message.content == CALL and not r.message.tool_calls


def test_a_tool_result_goes_back_into_the_conversation(client, http):
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "Sunny, 21 degrees.", "tool_name": "weather"},
    ]
    r = client.chat(MODEL, messages, tools=[WEATHER], options={"num_predict": 3})
    assert r.eval_count == 3
    openai = [
        messages[0],
        {**messages[1], "tool_calls": [_openai_call()]},
        {"role": "tool", "content": messages[2]["content"]},
    ]
    assert r.prompt_eval_count == prompt_tokens(http, openai, [WEATHER])


def _openai_call() -> dict:
    return {"id": "call_0", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}


def test_logprobs_come_per_token(client):
    r = client.chat(MODEL, HI, logprobs=True, top_logprobs=2, options={"seed": 4, "num_predict": 5})
    assert len(r.logprobs) == 5 and all(lp.logprob <= 0 for lp in r.logprobs)
    for lp in r.logprobs:  # the two most likely, and the sampled token when it is not one of them
        top = [t.token for t in lp.top_logprobs]
        assert lp.token in top and len(top) == (2 if lp.token in top[:2] else 3)
    assert "".join(lp.token for lp in r.logprobs) == r.message.content


def test_num_ctx_bounds_prompt_and_answer_together(client, http):
    num_ctx = prompt_tokens(http, HI) + 3  # the prompt, then room for three tokens
    r = client.chat(MODEL, HI, options={"num_ctx": num_ctx, "seed": 1})
    assert (r.eval_count, r.done_reason) == (3, "length")
    with pytest.raises(ollama.ResponseError, match="options.num_ctx is 5") as err:
        client.chat(MODEL, HI, options={"num_ctx": 5})
    assert err.value.status_code == 400


def test_no_messages_loads_the_model(client):
    r = client.chat(MODEL, [])
    assert (r.done, r.done_reason, r.message.content) == (True, "load", "")


# ---- generate


def test_generate_applies_the_template_and_returns_the_conversation(client, http, llm):
    r = client.generate(MODEL, "Say something.", system="Be brief.", options={"seed": 3, "num_predict": 6})
    rendered = [{"role": "system", "content": "Be brief."}, *HI]
    assert r.prompt_eval_count == prompt_tokens(http, rendered) and r.eval_count == 6
    assert llm.tokenizer.decode(r.context[r.prompt_eval_count :]) == r.response
    follow = client.generate(MODEL, "More.", context=r.context, options={"seed": 3, "num_predict": 2})
    assert follow.context[: len(r.context)] == r.context and follow.prompt_eval_count > len(r.context)
    streamed = list(
        client.generate(MODEL, "Say something.", system="Be brief.", stream=True, options={"seed": 3, "num_predict": 6})
    )
    assert "".join(p.response for p in streamed) == r.response and streamed[-1].context == r.context


def test_raw_generate_is_the_completion_of_the_prompt(client, http):
    r = client.generate(MODEL, "Once upon a time", raw=True, options={"seed": 8, "num_predict": 9})
    body = {"model": MODEL, "prompt": "Once upon a time", "seed": 8, "max_tokens": 9}
    assert r.response == http.post("/v1/completions", json=body).json()["choices"][0]["text"]


# ---- refused, in Ollama's error shape


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mirostat": 3}, "options.mirostat must be 0 (off), 1 or 2, got 3"),
        ({"typical_p": 0}, "options.typical_p must be in (0, 1]"),
        ({"repeat_penalty": 1.2, "repeat_last_n": -7}, "options.repeat_last_n must be -1"),
        ({"num_ctx": -1}, "options.num_ctx must be a positive number of tokens"),
        ({"num_predict": 0}, "options.num_predict must be -1"),
        ({"top_p": 1.5}, "options.top_p must be in"),
        ({"temperature": "hot"}, "options.temperature must be a number"),
        ({"seed": -5}, "options.seed must be"),
    ],
)
def test_options_not_honoured_are_refused_by_name(http, options, message):
    r = http.post("/api/chat", json={"model": MODEL, "messages": HI, "options": options, "stream": False})
    assert r.status_code == 400 and list(r.json()) == ["error"] and message in r.json()["error"]


def test_neutral_options_are_accepted(client):
    options = {"mirostat": 0, "typical_p": 1.0, "num_keep": 4, "repeat_last_n": 64, "seed": -1, "num_predict": 2}
    assert client.chat(MODEL, HI, options=options).eval_count == 2


def test_ignored_options_and_a_clamped_context_are_served_and_logged(client, caplog):
    options = {"num_thread": 4, "num_gpu": 99, "foo": 1, "num_ctx": 99999, "num_predict": 2, "temperature": 0}
    with caplog.at_level("WARNING", logger="tinyllm.server"):
        r = client.chat(MODEL, HI, options=options)
    assert r.eval_count == 2
    logged = " ".join(m for m in caplog.messages if "/api/chat" in m)
    assert "num_thread, num_gpu are set when the server starts: ignored" in logged
    assert "foo are not options this server knows: ignored" in logged
    assert "options.num_ctx 99999 is more than the model's context length: 1024 is used" in logged


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"model": "other", "messages": HI}, 404, "the model 'other' was not found"),
        ({"messages": HI, "think": True}, 400, "think True is not supported"),
        ({"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, 400, "images are not supported"),
        ({"messages": HI, "format": "yaml"}, 400, 'format must be "json" or a JSON schema'),
        ({"messages": HI, "format": {"type": "object", "properties": 5}}, 400, "format"),
        ({"messages": "hi"}, 400, "messages"),
    ],
)
def test_bad_chat_requests_answer_ollamas_error_shape(http, body, status, message):
    r = http.post("/api/chat", json={"model": MODEL, "stream": False, **body})
    assert r.status_code == status and list(r.json()) == ["error"] and message in r.json()["error"]


def test_a_model_name_with_the_latest_tag_is_the_model(client):
    assert client.chat(f"{MODEL}:latest", HI, options={"num_predict": 1}).eval_count == 1
    with pytest.raises(ollama.ResponseError) as err:
        client.chat("llama3", HI)
    assert err.value.status_code == 404


def test_generate_refuses_what_it_would_ignore(http):
    for extra, field in (({"suffix": "end"}, "suffix"), ({"template": "{{ .Prompt }}"}, "template")):
        r = http.post("/api/generate", json={"model": MODEL, "prompt": "x", "stream": False, **extra})
        assert r.status_code == 400 and r.json()["error"].startswith(f"{field} is not supported")


# ---- embeddings and the model routes


def test_embed_gives_the_normalized_mean_of_the_final_hidden_states(client, llm):
    r = client.embed(MODEL, ["first text", "second"])
    torch.testing.assert_close(torch.tensor(r.embeddings), llm.embed(["first text", "second"]), atol=1e-5, rtol=0)
    assert r.prompt_eval_count == len(llm.tokenizer.encode("first text")) + len(llm.tokenizer.encode("second"))
    legacy = client.embeddings(MODEL, "second")
    torch.testing.assert_close(torch.tensor(legacy.embedding), llm.embed("second", normalize=False), atol=1e-5, rtol=0)


def test_embed_cuts_to_the_context_unless_told_not_to(http, llm):
    text = "word " * 1500  # past the 1024-token context
    cut = http.post("/api/embed", json={"model": MODEL, "input": text}).json()["embeddings"][0]
    ids = llm.tokenizer.encode(text)[:1024]
    torch.testing.assert_close(torch.tensor(cut), llm.embed(ids), atol=1e-5, rtol=0)
    r = http.post("/api/embed", json={"model": MODEL, "input": text, "truncate": False})
    assert r.status_code == 400 and "more than the model's context length of 1024" in r.json()["error"]
    r = http.post("/api/embed", json={"model": MODEL, "input": "x", "options": {"temperature": 0.5}})
    assert r.status_code == 400 and r.json()["error"] == "options.temperature does nothing for embeddings; leave it out"


def test_the_model_routes_describe_the_one_model(client, http, llm):
    [listed] = client.list().models
    assert listed.model == MODEL and listed.details.family == "llama" and listed.size > 0
    shown = client.show(MODEL)
    assert shown.modelinfo["llama.context_length"] == 1024 and "tools" in shown.capabilities
    assert shown.template == llm.tokenizer.chat_template
    [running] = client.ps().models
    assert running.model == MODEL and running.context_length == 1024
    assert http.get("/api/version").json() == {"version": __import__("tinyllm").__version__}
    r = http.post("/api/pull", json={"model": "llama3"})
    assert r.status_code == 501 and "tinyllm pull" in r.json()["error"]


def test_the_api_key_guards_ollamas_routes_too(llm):
    with ServerThread(create_app(llm, served_model_name=MODEL, api_key="sesame")) as srv:
        srv.wait_ready()
        with pytest.raises(ollama.ResponseError) as err:
            ollama.Client(host=srv.url).list()
        assert err.value.status_code == 401 and "API key" in err.value.error
        keyed = ollama.Client(host=srv.url, headers={"Authorization": "Bearer sesame"})
        assert keyed.chat(MODEL, HI, options={"num_predict": 1}).eval_count == 1


@pytest.mark.parametrize("path", ["/api/chat", "/api/generate", "/api/embed", "/api/embeddings", "/api/show"])
def test_a_body_nested_too_deep_is_a_400_in_ollamas_shape(http, path):
    deep = "[" * 2000 + "]" * 2000
    r = http.post(
        path, content='{"model": "tiny", "extra": ' + deep + "}", headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400 and list(r.json()) == ["error"] and "limit of 64 levels" in r.json()["error"]
    assert (
        http.post("/api/chat", json={"messages": HI, "stream": False, "options": {"num_predict": 1}}).status_code == 200
    )
