"""keep_alive on every Ollama route that takes it: a duration string or a number of seconds; NaN and the
infinities (which Python's JSON parser reads from NaN, Infinity and -Infinity) are a 400 naming the field, as a
non-finite number is on every other field."""

import httpx
import pytest

from helpers.live_server import tiny_llm
from tinyllm.server import create_app
from tinyllm.server.ollama.keep_alive import keep_alive_seconds
from tinyllm.server.transport.server_thread import ServerThread
from tinyllm.server.wire.errors import APIError

MODEL = "tiny"
BODIES = {
    "/api/generate": '{"model": "tiny", "prompt": "Hi", "stream": false, "options": {"num_predict": 1}',
    "/api/chat": '{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "stream": false, '
    '"options": {"num_predict": 1}',
    "/api/embed": '{"model": "tiny", "input": "Hi"',
    "/api/embeddings": '{"model": "tiny", "prompt": "Hi"',
}


@pytest.fixture(scope="module")
def http(smollm_tokenizer, one_thread):
    app = create_app(tiny_llm(smollm_tokenizer), served_model_name=MODEL, num_blocks=64)
    with ServerThread(app) as srv, httpx.Client(base_url=srv.wait_ready().url, timeout=60) as c:
        yield c


def post(http: httpx.Client, path: str, keep_alive: str) -> httpx.Response:
    body = BODIES[path] + f', "keep_alive": {keep_alive}}}'
    return http.post(path, content=body, headers={"content-type": "application/json"})


@pytest.mark.parametrize("path", BODIES)
@pytest.mark.parametrize("keep_alive", ["NaN", "Infinity", "-Infinity"])
def test_a_keep_alive_that_is_not_a_finite_number_is_a_400_naming_it(http, path, keep_alive):
    r = post(http, path, keep_alive)
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("keep_alive: ") and "finite number of seconds" in r.json()["error"], r.text


@pytest.mark.parametrize("path", BODIES)
@pytest.mark.parametrize("keep_alive", ['"5m"', "2.5", "-1"])
def test_durations_and_finite_seconds_are_accepted(http, path, keep_alive):
    assert post(http, path, keep_alive).status_code == 200


@pytest.mark.parametrize(
    ("sent", "seconds"),
    [
        (300, 300.0),
        (2.5, 2.5),
        (0, 0.0),
        ("0", 0.0),
        ("0s", 0.0),
        ("300", 300.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("90s", 90.0),
        ("250ms", 0.25),
        (" 10s ", 10.0),
        (-1, None),
        ("-1", None),
        ("-5m", None),
        (-0.5, None),
    ],
)
def test_keep_alive_reads_seconds_and_go_durations_as_ollama_does(sent, seconds):
    assert keep_alive_seconds(sent) == seconds


@pytest.mark.parametrize("sent", ["5 minutes", "m", "", "1h-5m", "5x", "--1", True, [1], float("nan")])
def test_keep_alive_that_is_no_duration_is_a_400_naming_it(sent):
    with pytest.raises(APIError) as caught:
        keep_alive_seconds(sent)
    assert caught.value.status == 400 and caught.value.param == "keep_alive"
    assert caught.value.message.startswith("keep_alive: ") and repr(sent) in caught.value.message


def test_a_huge_keep_alive_is_clipped_in_its_400():
    with pytest.raises(APIError) as caught:
        keep_alive_seconds("x" * 1_000_000)
    assert caught.value.status == 400 and len(caught.value.message) < 1000 and "more)" in caught.value.message
