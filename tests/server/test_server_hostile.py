"""Requests a hostile or careless client sends get a 4xx naming the problem, never a 5xx, and the server keeps
serving, on the same keep-alive connection: bodies nested thousands deep in any field of any POST route, schemas
nested deep as JSON text, tool parameters nested 300 levels, recursion anywhere in a request's preparation,
oversized tools and choices (refused before the template or the tokenizer runs), bodies not sent as JSON, and a
grammar that gives up while generating (the request's own 400, or its error event in a stream)."""

import http.client
import json

import httpx
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.grammar.constraint import Constraint, GrammarError
from tinyllm.grammar.structured import StructuredOutput
from tinyllm.server import create_app
from tinyllm.server.endpoints import chat as chat_module
from tinyllm.server.transport.server_thread import ServerThread
from tinyllm.server.wire.limits import MAX_CHOICES, MAX_GRAMMAR_BYTES, MAX_JSON_DEPTH, MAX_TOOLS

CONTEXT = 256
CHAT = [{"role": "user", "content": "Hi"}]
POST_ROUTES = [
    "/v1/chat/completions",
    "/chat/completions",
    "/v1/completions",
    "/completions",
    "/v1/responses",
    "/responses",
    "/tokenize",
    "/detokenize",
]
DEEP = "[" * 2000 + "]" * 2000  # a 4 KB body part


@pytest.fixture(scope="module")
def server(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(11, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=CONTEXT), smollm_tokenizer
    )
    with ServerThread(create_app(llm, num_blocks=64)) as srv:
        yield srv.wait_ready()


@pytest.fixture
def conn(server):
    c = http.client.HTTPConnection(server.host, server.port, timeout=120)
    yield c
    c.close()


def send(conn, path: str, body: bytes | str | dict, content_type: str | None = "application/json"):
    """(status, JSON answer) over the connection, which stays open unless the server closed it."""
    raw = json.dumps(body) if isinstance(body, dict) else body
    headers = {"Content-Type": content_type} if content_type is not None else {}
    conn.request("POST", path, body=raw.encode() if isinstance(raw, str) else raw, headers=headers)
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def still_serves(conn, sock) -> None:
    """A plain request answers 200 on the very socket the hostile one came over."""
    status, answer = send(conn, "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 2, "ignore_eos": True})
    assert status == 200 and answer["usage"]["completion_tokens"] == 2
    assert conn.sock is sock, "the server dropped the keep-alive connection"


def post(server, path, body, **kw):
    return httpx.post(f"{server.url}{path}", json=body, timeout=120, **kw)


def error_of(r: httpx.Response) -> dict:
    assert 400 <= r.status_code < 500, r.text
    return r.json()["error"]


@pytest.mark.parametrize("path", POST_ROUTES)
@pytest.mark.parametrize(
    "body, param",
    [
        ('{"model": null, "extra": ' + DEEP + "}", "extra"),
        ('{"messages": [{"role": "user", "content": ' + DEEP + "}]}", "messages"),
        ('{"prompt": "x", "response_format": {"type": "json_schema", "json_schema": ' + DEEP + "}}", "response_format"),
        (DEEP, None),
    ],
)
def test_deep_bodies_are_a_400_naming_the_field_and_the_connection_stays(conn, path, body, param):
    conn.connect()
    sock = conn.sock
    status, answer = send(conn, path, body)
    assert status == 400 and answer["error"]["param"] == param, answer
    assert f"limit of {MAX_JSON_DEPTH} levels" in answer["error"]["message"]
    still_serves(conn, sock)


@pytest.mark.parametrize(
    "path, field, value",
    [
        ("/v1/chat/completions", "guided_json", "[" * 5000 + "]" * 5000),
        ("/v1/completions", "json_schema", '{"anyOf": [' * 2500 + "{}" + "]}" * 2500),
        ("/v1/completions", "structured_outputs", {"json": "[" * 5000 + "]" * 5000}),
        (
            "/v1/chat/completions",
            "response_format",
            {"type": "json_schema", "json_schema": {"name": "x", "schema": "[" * 5000 + "]" * 5000}},
        ),
    ],
)
def test_schemas_nested_deep_as_text_are_a_400_naming_the_field(server, path, field, value):
    body = {"messages": CHAT, "prompt": "x", "max_tokens": 4, field: value}
    body.pop("prompt" if "chat" in path else "messages")
    error = error_of(post(server, path, body))
    assert error["param"] == field and f"{MAX_JSON_DEPTH} levels" in error["message"], error


def nested_object(levels: int) -> str:
    """A JSON schema (as text: json.dumps itself recurses) of objects holding objects, `levels` deep."""
    opening, closing = '{"type": "object", "properties": {"x": ', '}, "required": ["x"]}'
    return opening * levels + '{"type": "string"}' + closing * levels


@pytest.mark.parametrize("levels", [3, 12, 20, 31, 40, 100, 1000])
def test_schemas_of_any_depth_never_give_a_5xx(server, levels):
    """Below the limits a schema compiles and constrains (200), above them it is refused (400): never a 500."""
    r = post(server, "/v1/completions", {"prompt": "x", "max_tokens": 8, "guided_json": nested_object(levels)})
    assert r.status_code in (200, 400), r.text
    if r.status_code == 400:
        assert r.json()["error"]["param"] == "guided_json"
    if levels == 3:
        assert r.status_code == 200 and r.json()["choices"][0]["text"].startswith('{"x":')
    if 2 * levels + 1 > MAX_JSON_DEPTH:  # an object and its properties per level, and the innermost schema
        assert r.status_code == 400 and f"{MAX_JSON_DEPTH} levels" in r.json()["error"]["message"]


def tool(name: str, parameters: dict | None = None, description: str = "") -> dict:
    function = {"name": name, "description": description, "parameters": parameters or {"type": "object"}}
    return {"type": "function", "function": function}


def test_tool_parameters_nested_300_levels_are_a_400_naming_tools(conn):
    conn.connect()
    sock = conn.sock
    tools = '[{"type": "function", "function": {"name": "f", "parameters": ' + nested_object(300) + "}}]"
    body = '{"messages": [{"role": "user", "content": "Hi"}], "tool_choice": "required", "tools": ' + tools + "}"
    status, answer = send(conn, "/v1/chat/completions", body)
    assert status == 400 and answer["error"]["param"] == "tools", answer
    still_serves(conn, sock)


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "f"}}])
def test_a_forced_tool_whose_arguments_contain_themselves_is_a_400_naming_tools(conn, tool_choice):
    conn.connect()
    sock = conn.sock
    parameters = {"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]}  # no finite instance
    body = {"messages": CHAT, "tools": [tool("f", parameters)], "tool_choice": tool_choice}
    status, answer = send(conn, "/v1/chat/completions", body)
    assert status == 400 and answer["error"]["param"] == "tools", answer
    assert "no finite" in answer["error"]["message"]
    still_serves(conn, sock)


class TemplateSpy:
    """Counts calls of the tokenizer's encode and chat template on the live server."""

    def __init__(self, tok, monkeypatch):
        self.calls = 0
        for name in ("encode", "apply_chat_template", "encode_chat"):
            real = getattr(tok, name)

            def counted(*args, _real=real, **kwargs):
                self.calls += 1
                return _real(*args, **kwargs)

            monkeypatch.setattr(tok, name, counted)


@pytest.mark.parametrize(
    "tools, says",
    [
        ([tool(f"f{i}") for i in range(MAX_TOOLS + 1)], f"limit of {MAX_TOOLS}"),
        ([tool("f", {"type": "object", "description": "x" * MAX_GRAMMAR_BYTES})], f"limit of {MAX_GRAMMAR_BYTES}"),
        ([tool("f", description="d" * (2 << 20))], "tools' JSON"),  # a 2 MB description, as in the probe
    ],
)
def test_oversized_tools_are_refused_before_the_template_or_the_tokenizer(server, monkeypatch, tools, says):
    spy = TemplateSpy(server.server.config.app.state.server.ready.tokenizer, monkeypatch)
    for path, body in (
        ("/v1/chat/completions", {"messages": CHAT, "tools": tools, "max_tokens": 1}),
        ("/tokenize", {"messages": CHAT, "tools": tools}),
    ):
        error = error_of(post(server, path, body))
        assert error["param"] == "tools" and says in error["message"], error
    assert spy.calls == 0


@pytest.mark.parametrize(
    "field, value",
    [
        ("guided_choice", [f"c{i}" for i in range(MAX_CHOICES + 1)]),
        ("structured_outputs", {"choice": [f"c{i}" for i in range(MAX_CHOICES + 1)]}),
        ("guided_choice", ["x" * 1024 + str(i) for i in range(70)]),  # 70 KB of choices
    ],
)
def test_too_many_choices_are_a_400_naming_the_field(server, field, value):
    error = error_of(post(server, "/v1/completions", {"prompt": "x", field: value}))
    assert error["param"] == field and "limit of" in error["message"]


def test_a_thousand_choices_run_end_to_end(server):
    choices = [f"choice number {i}" for i in range(1000)]
    r = post(
        server,
        "/v1/chat/completions",
        {"messages": CHAT, "guided_choice": choices, "n": 3, "temperature": 1.0, "seed": 5, "max_tokens": 40},
    )
    assert r.status_code == 200, r.text
    for choice in r.json()["choices"]:
        assert choice["finish_reason"] == "stop" and choice["message"]["content"] in choices


@pytest.mark.parametrize("path", POST_ROUTES)
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_json_body_is_read_whatever_its_content_type_on_every_post_route(conn, path, content_type):
    """As `curl -d` sends it (a form's type) or a client that sends none: no web page is involved (no Origin)."""
    route = path.removeprefix("/v1")
    body = {
        "/chat/completions": {"messages": CHAT, "max_tokens": 1},
        "/completions": {"prompt": "x", "max_tokens": 1},
        "/responses": {"input": "x", "max_output_tokens": 16},
        "/tokenize": {"prompt": "x"},
        "/detokenize": {"tokens": [5]},
    }[route]
    status, answer = send(conn, path, body, content_type)
    assert status == 200, answer


@pytest.mark.parametrize("path", POST_ROUTES)
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/json"])
def test_a_page_on_another_origin_cannot_drive_any_post_route(server, path, content_type):
    headers = {"Origin": "http://evil.example", **({"Content-Type": content_type} if content_type else {})}
    r = httpx.post(f"{server.url}{path}", content=json.dumps({"prompt": "x"}), headers=headers, timeout=60)
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed", r.text
    assert "http://evil.example" in r.json()["error"]["message"]


def test_a_completion_that_also_sends_messages_is_answered_not_a_500(server):
    # messages is not a completion's field: an undeclared extra, ignored as others are, never read as messages
    r = post(server, "/v1/completions", {"prompt": "x", "messages": CHAT, "max_tokens": 1})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 1, r.text


def test_json_with_a_charset_is_json(server):
    r = httpx.post(
        f"{server.url}/v1/completions",
        content=json.dumps({"prompt": [5], "max_tokens": 1}).encode(),
        headers={"Content-Type": "application/json; charset=utf-8"},
        timeout=60,
    )
    assert r.status_code == 200, r.text


def test_recursion_anywhere_in_preparation_is_a_400(server, monkeypatch):
    def too_deep(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(chat_module, "chat_prompt", too_deep)
    error = error_of(post(server, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 1}))
    assert "nests too deeply" in error["message"]
    monkeypatch.undo()
    monkeypatch.setattr(StructuredOutput, "json_schema", classmethod(lambda cls, *args, **kwargs: too_deep()))
    error = error_of(post(server, "/v1/completions", {"prompt": "x", "guided_json": {"type": "object"}}))
    assert error["param"] == "guided_json" and "nests too deeply" in error["message"]
    monkeypatch.undo()
    assert post(server, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 1}).status_code == 200


def test_a_schema_error_from_the_schema_reader_names_the_field(server):
    error = error_of(post(server, "/v1/completions", {"prompt": "x", "guided_json": '{"type": '}))
    assert error["param"] == "guided_json" and "not valid JSON" in error["message"]


@pytest.fixture
def grammar_gives_up(monkeypatch):
    """Every constrained request's grammar gives up once a token is generated (the engine's own path
    for a grammar failing mid-generation: the request fails alone, its fault)."""
    real = Constraint._mask_now

    def mask_now(self, history):
        if len(history) >= 1:
            raise GrammarError("the grammar gave up on the generated text: injected")
        return real(self, history)

    monkeypatch.setattr(Constraint, "_mask_now", mask_now)


def test_a_grammar_that_gives_up_is_the_requests_400(server, grammar_gives_up):
    body = {"prompt": "x", "max_tokens": 8, "guided_regex": "[a-z]{8}"}
    r = post(server, "/v1/completions", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == "the grammar gave up on the generated text: injected"
    chat = post(server, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "guided_regex": "[a-z]{8}"})
    assert chat.status_code == 400
    plain = post(server, "/v1/completions", {"prompt": "x", "max_tokens": 3, "ignore_eos": True})
    assert plain.status_code == 200 and plain.json()["usage"]["completion_tokens"] == 3


def events_of(r: httpx.Response) -> list:
    return [e[len("data: ") :] for e in r.text.split("\n\n") if e.startswith("data: ")]


def test_a_grammar_that_gives_up_in_a_stream_ends_that_choice_with_an_error_event(server, grammar_gives_up):
    body = {"messages": CHAT, "max_tokens": 8, "guided_regex": "[a-z]{8}", "stream": True}
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200
    events = events_of(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if "choices" in c and c["choices"]]
    assert "error" in finishes
    error = chunks[-1]["error"]
    assert error["type"] == "invalid_request_error" and "injected" in error["message"]


def test_llama_cpps_typical_p_and_repeat_last_n_are_honoured_on_v1(server):
    for body in (
        {"prompt": "x", "max_tokens": 2, "typical_p": 0.5, "temperature": 1.0, "seed": 3},
        {"prompt": "x", "max_tokens": 2, "repeat_last_n": 10**30, "repetition_penalty": 1.2},
        {"prompt": "x", "max_tokens": 2, "repeat_last_n": 0, "repetition_penalty": 1.2},
    ):
        r = post(server, "/v1/completions", body)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2, r.text
    for bad, words in (({"typical_p": 0}, "typical_p must be in (0, 1]"), ({"repeat_last_n": -2}, "repeat_last_n")):
        r = post(server, "/v1/completions", {"prompt": "x", "max_tokens": 2, **bad})
        assert r.status_code == 400 and words in r.json()["error"]["message"], r.text
