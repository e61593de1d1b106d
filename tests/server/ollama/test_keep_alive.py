"""keep_alive on every Ollama route that takes it: a duration string or a number of seconds; NaN and the
infinities (which Python's JSON parser reads from NaN, Infinity and -Infinity) are a 400 naming the field, as a
non-finite number is on every other field."""

import httpx
import pytest

from helpers.live_server import tiny_llm
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

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
