"""The HTTP server through the official openai client, plus /health, /tokenize, /detokenize, /v1/models,
/metrics and fault isolation. A tiny random model keeps the server starting in a fraction of a second."""

import json
import threading
import time

import httpx
import openai
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

MODEL = "tiny"
KEY = "test-key"
CHAT = [{"role": "user", "content": "Tell me about rivers."}]


def tiny_llm(tok, seed=0, context=512):
    return LLM.from_parts(tiny_llama(seed, vocab_size=tok.vocab_size, max_position_embeddings=context), tok)


@pytest.fixture(scope="module")
def server(smollm_tokenizer, one_thread):
    app = create_app(tiny_llm(smollm_tokenizer), served_model_name=MODEL, api_key=KEY, num_blocks=128)
    with ServerThread(app) as srv:
        yield srv.wait_ready()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=60)


def auth():
    return {"Authorization": f"Bearer {KEY}"}


def chat(client, **kw):
    kw.setdefault("max_tokens", 12)
    return client.chat.completions.create(model=MODEL, messages=CHAT, **kw)


def test_chat_answer_has_openai_shape(client):
    r = chat(client, seed=3)
    assert r.object == "chat.completion" and r.model == MODEL and r.id.startswith("chatcmpl-")
    choice = r.choices[0]
    assert choice.index == 0 and choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length") and choice.logprobs is None
    u = r.usage
    assert u.completion_tokens <= 12 and u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details.cached_tokens >= 0
    assert r.seed == 3


def test_same_seed_same_text_and_returned_seed_reproduces(client):
    a, b = chat(client, seed=11), chat(client, seed=11)
    assert a.choices[0].message.content == b.choices[0].message.content
    free = chat(client)  # no seed: the server draws one and says which
    again = chat(client, seed=free.seed)
    assert again.choices[0].message.content == free.choices[0].message.content


def test_chat_stream_concatenates_to_the_whole_answer(client):
    whole = chat(client, seed=5, max_tokens=16).choices[0].message.content
    chunks = list(chat(client, seed=5, max_tokens=16, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] in (["length"], ["stop"])


def test_completions_text_ids_and_batches(client, smollm_tokenizer):
    text = client.completions.create(model=MODEL, prompt="The river", max_tokens=8, seed=2)
    assert text.object == "text_completion" and len(text.choices) == 1
    ids = smollm_tokenizer.encode("The river")
    by_ids = client.completions.create(model=MODEL, prompt=ids, max_tokens=8, seed=2)
    assert by_ids.choices[0].text == text.choices[0].text
    batch = client.completions.create(model=MODEL, prompt=["The river", "A bridge"], max_tokens=8, seed=2)
    assert [c.index for c in batch.choices] == [0, 1]
    assert batch.choices[0].text == text.choices[0].text
    assert batch.usage.prompt_tokens == len(ids) + len(smollm_tokenizer.encode("A bridge"))
    streamed = client.completions.create(model=MODEL, prompt="The river", max_tokens=8, seed=2, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == text.choices[0].text


def test_stop_string_cuts_the_answer(client):
    full = client.completions.create(model=MODEL, prompt="Once", max_tokens=24, seed=9, temperature=0.0)
    text = full.choices[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    cut = client.completions.create(model=MODEL, prompt="Once", max_tokens=24, seed=9, temperature=0.0, stop=[stop])
    assert cut.choices[0].text == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_chat_logprobs(client):
    r = chat(client, seed=4, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for item in content:
        # the top 3, and the sampled token after them when it is not one of them
        top = item.top_logprobs
        assert item.logprob <= 0 and (len(top) == 3 or (len(top) == 4 and top[3].token == item.token))
        assert item.token in [t.token for t in top] and top[0].logprob >= top[2].logprob >= top[-1].logprob
    if r.choices[0].finish_reason == "length":  # every token's bytes together are the text
        assert bytes(b for item in content for b in item.bytes).decode() == r.choices[0].message.content


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=6, seed=1, logprobs=2)
    lp = r.choices[0].logprobs
    n = r.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert all(len(top) <= 3 for top in lp.top_logprobs) and lp.text_offset[0] == 0
    assert all(token in top for token, top in zip(lp.tokens, lp.top_logprobs))  # the sampled one is always there


def test_n_choices_differ_and_follow_seed_plus_i(client):
    r = chat(client, seed=20, n=2)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].message.content != r.choices[1].message.content
    second = chat(client, seed=21)
    assert second.choices[0].message.content == r.choices[1].message.content


def test_cached_tokens_reported_on_a_repeated_prompt(client):
    prompt = "The same long prompt, " * 12
    client.completions.create(model=MODEL, prompt=prompt, max_tokens=2, seed=0)
    again = client.completions.create(model=MODEL, prompt=prompt, max_tokens=2, seed=0)
    assert again.usage.prompt_tokens_details.cached_tokens >= 16


@pytest.mark.parametrize(
    "bad, param",
    [
        (dict(temperature=-1.0), "temperature"),
        (dict(top_p=2.0), "top_p"),
        (dict(max_tokens=0), "max_tokens"),
        (dict(n=0), "n"),
        (dict(extra_body={"top_k": "many"}), "top_k"),
        (dict(presence_penalty=3.0), "presence_penalty"),
        (dict(top_logprobs=3), "top_logprobs"),
        (dict(seed=-1), "seed"),
        (dict(stop=[""]), "stop"),
    ],
)
def test_bad_parameters_are_400_naming_the_field(client, bad, param):
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, **bad)
    assert info.value.status_code == 400 and info.value.body["param"] == param


def test_bad_prompts_are_400(client):
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="", max_tokens=2)
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt=[5] * 600, max_tokens=2)
    assert "context" in info.value.body["message"]
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt=[10**9], max_tokens=2)


@pytest.mark.parametrize("role", ["user", "system", "tool"])
def test_a_message_without_content_is_400_naming_it(client, role):
    messages = [{"role": "user", "content": "Hi"}, {"role": role}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    assert info.value.body["param"] == "messages"
    assert info.value.body["message"] == f"messages[1].content is missing; a {role!r} message needs its text"


def test_an_assistant_message_may_leave_its_content_out(client):
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None},
        {"role": "user", "content": "Go"},
    ]
    out = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    assert out.choices[0].finish_reason == "length"


def test_wrong_key_and_unknown_model(server, client):
    bad = openai.OpenAI(base_url=f"{server.url}/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert httpx.get(f"{server.url}/v1/models").status_code == 401
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="other", messages=CHAT, max_tokens=2)
    assert info.value.body["code"] == "model_not_found"


def test_models_tokenize_detokenize(server, client, smollm_tokenizer):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    r = httpx.post(f"{server.url}/tokenize", json={"prompt": "Hello world"}, headers=auth()).json()
    assert r["tokens"] == smollm_tokenizer.encode("Hello world") and r["count"] == len(r["tokens"])
    assert r["max_model_len"] == 512
    m = httpx.post(f"{server.url}/tokenize", json={"messages": CHAT}, headers=auth()).json()
    assert m["count"] > r["count"]
    d = httpx.post(f"{server.url}/detokenize", json={"tokens": r["tokens"]}, headers=auth()).json()
    assert d == {"prompt": "Hello world"}
    bad = httpx.post(f"{server.url}/detokenize", json={"tokens": [-1]}, headers=auth())
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    both = httpx.post(f"{server.url}/tokenize", json={"prompt": "a", "messages": CHAT}, headers=auth())
    assert both.status_code == 400


def test_metrics_text(server, client):
    chat(client, seed=1, max_tokens=3)
    text = httpx.get(f"{server.url}/metrics").text
    for name in (
        "tinyllm_requests_running",
        "tinyllm_requests_waiting",
        "tinyllm_kv_blocks_used",
        "tinyllm_kv_blocks_total 128.0",
        "tinyllm_kv_blocks_cached",
        "tinyllm_prompt_tokens_total",
        "tinyllm_generation_tokens_total",
        "tinyllm_time_to_first_token_seconds_bucket",
        "tinyllm_inter_token_latency_seconds_bucket",
        'tinyllm_requests_finished_total{finish_reason="length"}',
    ):
        assert name in text


def test_bodies_that_are_not_json_objects(server):
    url = f"{server.url}/v1/completions"
    for kwargs in (
        dict(content=b"[1, 2]", headers={"content-type": "application/json"}),
        dict(content=b"{}"),
        dict(content=b'{"prompt": "x"', headers={"content-type": "application/json"}),
    ):
        r = httpx.post(url, headers={**auth(), **kwargs.pop("headers", {})}, **kwargs)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    big = httpx.post(url, content=b" " * (17 << 20), headers={**auth(), "content-type": "application/json"})
    assert big.status_code == 413 and "larger than" in big.json()["error"]["message"]


def test_openapi_and_unknown_route(server):
    assert httpx.get(f"{server.url}/openapi.json").status_code == 401  # behind the key, as /v1 is
    assert httpx.get(f"{server.url}/docs").status_code == 401
    assert httpx.get(f"{server.url}/docs", headers=auth()).status_code == 200
    spec = httpx.get(f"{server.url}/openapi.json", headers=auth()).json()
    assert "/v1/chat/completions" in spec["paths"] and "/v1/completions" in spec["paths"]
    missing = httpx.get(f"{server.url}/v1/nothing-here", headers=auth())
    assert missing.status_code == 404 and "error" in missing.json()


def engine_of(server):
    return server.server.config.app.state.server.ready.engine.engine


def test_a_failing_step_fails_its_requests_and_the_engine_goes_on(server, client):
    engine = engine_of(server)
    real_step, calls = engine.step, []

    def faulty():
        if not calls:
            calls.append(1)
            raise RuntimeError("injected fault")
        return real_step()

    engine.step = faulty
    try:
        with pytest.raises(openai.InternalServerError) as info:
            chat(client, seed=1)
        assert info.value.body["type"] == "server_error"
    finally:
        engine.step = real_step
    assert chat(client, seed=1).choices[0].finish_reason in ("stop", "length")
    assert httpx.get(f"{server.url}/health").status_code == 200


def test_a_failing_add_is_a_500_for_that_request(server, client):
    engine = engine_of(server)
    real_add = engine.add_request

    def faulty(prompt, params, request_id=None):
        raise RuntimeError("injected fault")

    engine.add_request = faulty
    try:
        with pytest.raises(openai.InternalServerError):
            chat(client, seed=1)
    finally:
        engine.add_request = real_add
    assert chat(client, seed=1).choices[0].finish_reason in ("stop", "length")


def test_a_bug_in_a_handler_is_a_500_with_the_error_object(server, client, monkeypatch):
    texts = server.server.config.app.state.server.ready.texts

    def broken(token_id):
        raise KeyError(token_id)

    monkeypatch.setattr(texts, "get", broken)
    r = httpx.post(f"{server.url}/v1/completions", headers=auth(), json={"prompt": "x", "max_tokens": 2, "logprobs": 1})
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    monkeypatch.undo()
    assert chat(client, seed=2, logprobs=True).choices[0].logprobs is not None


def test_a_fault_mid_stream_ends_the_stream_with_an_error_event(server):
    engine = engine_of(server)
    real_step, calls = engine.step, []

    def faulty():
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected fault")
        return real_step()

    engine.step = faulty
    try:
        body = {"prompt": "x", "max_tokens": 20, "stream": True, "ignore_eos": True}
        text = httpx.post(f"{server.url}/v1/completions", json=body, headers=auth(), timeout=30).text
    finally:
        engine.step = real_step
    events = [e[len("data: ") :] for e in text.split("\n\n") if e]
    assert events[-1] == "[DONE]" and '"server_error"' in events[-2]
    assert json.loads(events[0])["choices"][0]["text"] is not None  # text came before the fault


def test_health_is_503_while_loading(smollm_tokenizer, one_thread):
    release = threading.Event()

    def loader():
        release.wait(30)
        return tiny_llm(smollm_tokenizer)

    with ServerThread(create_app(loader, num_blocks=32)) as srv:
        r = httpx.get(f"{srv.url}/health")
        assert r.status_code == 503 and r.json()["status"] == "loading"
        busy = httpx.post(f"{srv.url}/v1/completions", json={"prompt": "x", "max_tokens": 1})
        assert busy.status_code == 503 and busy.json()["error"]["code"] == "model_not_ready"
        release.set()
        srv.wait_ready(30)
        body = httpx.get(f"{srv.url}/health").json()
        assert body["status"] == "ok" and body["kv_blocks"]["total"] == 32 and body["running"] == 0


def test_an_option_the_model_cannot_take_fails_the_load_in_one_line(smollm_tokenizer, one_thread, caplog):
    """--kv-dtype q8_0 on a model whose head dimension (16) is no multiple of 32: /health says it failed and why,
    requests get 503, and the log has the message without a traceback."""
    with ServerThread(create_app(lambda: tiny_llm(smollm_tokenizer), num_blocks=32, kv_dtype="q8_0")) as srv:
        deadline = time.monotonic() + 30
        while httpx.get(f"{srv.url}/health").json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.05)
        r = httpx.get(f"{srv.url}/health")
        assert r.status_code == 503 and r.json()["status"] == "failed"
        busy = httpx.post(f"{srv.url}/v1/completions", json={"prompt": "x", "max_tokens": 1})
        assert busy.status_code == 503 and "TinyLLMError while loading the model" in busy.json()["error"]["message"]
    failed = [r for r in caplog.records if r.getMessage().startswith("loading the model failed")]
    assert failed and "q8_0 needs a head_dim that is a multiple of 32, got 16" in failed[0].getMessage()
    assert failed[0].exc_info is None


def test_logit_bias_forces_and_bans_tokens(client, smollm_tokenizer):
    forced = client.completions.create(
        model=MODEL,
        prompt="Rivers",
        max_tokens=4,
        temperature=0,
        logit_bias={"1234": 100},
        extra_body={"ignore_eos": True},
    )
    assert forced.choices[0].text == smollm_tokenizer.decode([1234] * 4)
    plain = client.completions.create(model=MODEL, prompt="Rivers", max_tokens=1, temperature=0, logprobs=0)
    first = smollm_tokenizer.encode(plain.choices[0].text, add_special_tokens=False)[0]
    again = client.completions.create(
        model=MODEL, prompt="Rivers", max_tokens=1, temperature=0, logit_bias={str(first): -100}
    )
    assert again.choices[0].text != plain.choices[0].text


@pytest.mark.parametrize(
    "bias, words",
    [
        ({"x": 1}, "decimal integers"),
        ({"5": 101}, "[-100, 100]"),
        ({"49152": 1}, "vocabulary"),
        ({str(i): 1 for i in range(301)}, "at most 300"),
    ],
)
def test_bad_logit_bias_is_400_naming_it(client, bias, words):
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, logit_bias=bias)
    assert info.value.body["param"] == "logit_bias" and words in info.value.body["message"]


def test_models_by_id(client):
    card = client.models.retrieve(MODEL)
    assert card.id == MODEL and card.object == "model"
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("other-model")
    assert info.value.body["code"] == "model_not_found"


def test_routes_without_the_v1_prefix_answer_as_the_v1_ones(server, client):
    bare = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=60)
    assert chat(bare, seed=4).choices[0].message.content == chat(client, seed=4).choices[0].message.content
    kw = dict(model=MODEL, prompt="The river", max_tokens=6, seed=4)
    assert bare.completions.create(**kw).choices[0].text == client.completions.create(**kw).choices[0].text
    assert [m.id for m in bare.models.list().data] == [MODEL] and bare.models.retrieve(MODEL).id == MODEL
    for path in ("/chat/completions", "/completions", "/responses"):
        assert httpx.post(f"{server.url}{path}", json={}).status_code == 401  # behind the key, as /v1 is
    assert httpx.get(f"{server.url}/models").status_code == 401


def test_legacy_logprobs_zero_holds_the_sampled_token(client):
    kw = dict(model=MODEL, prompt="Rivers", max_tokens=5, temperature=0, logprobs=0, extra_body={"ignore_eos": True})
    lps = client.completions.create(**kw).choices[0].logprobs
    assert len(lps.tokens) == 5
    assert lps.top_logprobs == [{t: lp} for t, lp in zip(lps.tokens, lps.token_logprobs)]
    streamed = [c.choices[0].logprobs for c in client.completions.create(**kw, stream=True) if c.choices[0].logprobs]
    assert [top for lp in streamed for top in lp.top_logprobs] == lps.top_logprobs
    chat_lps = chat(client, max_tokens=3, temperature=0, logprobs=True, top_logprobs=0).choices[0].logprobs
    assert all(entry.top_logprobs == [] for entry in chat_lps.content)  # chat's top_logprobs=0: none, as OpenAI's
