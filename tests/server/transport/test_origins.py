"""The Origin guard (transport/origins.py): a POST that names a web page's origin the server does not allow is a
403 before any route reads it; the server's own origin (its chat page), an allowed origin and no Origin at all
(curl, the SDKs, Ollama's clients) pass, on the OpenAI and the Ollama routes alike."""

import httpx
import pytest

from helpers.live_server import tiny_llm
from tinyllm.server import create_app
from tinyllm.server.transport.origins import OriginGuard
from tinyllm.server.transport.server_thread import ServerThread

ALLOWED = "https://app.example"
ROUTES = {
    "/v1/completions": {"prompt": "x", "max_tokens": 1},
    "/api/generate": {"model": "tinyllm", "prompt": "x", "stream": False, "options": {"num_predict": 1}},
    "/api/embed": {"model": "tinyllm", "input": "x"},
}


@pytest.fixture(scope="module")
def url(smollm_tokenizer, one_thread):
    app = create_app(tiny_llm(smollm_tokenizer), num_blocks=64, allowed_origins=[ALLOWED])
    with ServerThread(app) as srv:
        yield srv.wait_ready().url


@pytest.mark.parametrize("path", ROUTES)
def test_only_the_servers_own_and_allowed_origins_may_post(url, path):
    own = url  # http://127.0.0.1:PORT: what the chat page's fetches name
    port = url.rsplit(":", 1)[1]
    cases = {
        None: 200,
        own: 200,
        ALLOWED: 200,
        ALLOWED + "/": 200,
        "http://evil.example": 403,
        f"http://localhost:{port}": 403,  # another host name: not the page this server served
        "http://127.0.0.1:1": 403,  # another port on the same machine is another origin
        "null": 403,  # a file:// page or a sandboxed frame
    }
    for origin, status in cases.items():
        headers = {"content-type": "text/plain", **({"origin": origin} if origin else {})}
        r = httpx.post(url + path, json=ROUTES[path], headers=headers, timeout=60)
        assert r.status_code == status, (origin, r.text)


def test_reads_pass_whatever_the_origin(url):
    r = httpx.get(f"{url}/v1/models", headers={"origin": "http://evil.example"}, timeout=30)
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_a_star_allows_every_origin():
    guard = OriginGuard(None, allowed=("*",))
    assert guard.is_allowed("http://anything.example", "127.0.0.1:8000")
    assert guard.is_allowed("null", "127.0.0.1:8000")
    none = OriginGuard(None)
    assert none.is_allowed("http://127.0.0.1:8000", "127.0.0.1:8000")
    assert not none.is_allowed("https://127.0.0.1:8000.evil.example", "127.0.0.1:8000")
    assert not none.is_allowed("http://127.0.0.1:8000@evil.example", "127.0.0.1:8000")
