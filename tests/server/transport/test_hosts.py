"""The Host allow-list against DNS rebinding: a request naming another host gets 400 on every route (the open
ones too) while the allowed names, with or without a port, are served; `tinyllm serve` on a loopback address
allows only the loopback names unless --allowed-hosts says otherwise."""

import argparse
import urllib.error
import urllib.request

import httpx
import pytest

from helpers.live_server import serve
from helpers.model_files import random_tiny_llama, write_hf_folder
from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.errors import TinyLLMError
from tinyllm.server import create_app
from tinyllm.server.cli import allowed_hosts
from tinyllm.server.transport.hosts import LOOPBACK_NAMES, HostAllowList, default_allowed_hosts, parse_allowed_hosts
from tinyllm.server.transport.server_thread import ServerThread


@pytest.fixture(scope="module")
def url(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(2, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=64), smollm_tokenizer
    )
    app = create_app(llm, allowed_hosts=(*LOOPBACK_NAMES, "models.example:8443"), num_blocks=16)
    with ServerThread(app) as srv:
        yield srv.wait_ready().url


@pytest.mark.parametrize(
    "method, path", [("GET", "/health"), ("GET", "/metrics"), ("GET", "/v1/models"), ("POST", "/v1/completions")]
)
def test_other_hosts_are_refused_on_every_route(url, method, path):
    body = {"prompt": [5, 6], "max_tokens": 1}
    for host in ("attacker.example", "attacker.example:80", "localhost.attacker.example", "models.example"):
        r = httpx.request(method, f"{url}{path}", json=body, headers={"Host": host}, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["code"] == "host_not_allowed", (host, r.text)
        assert host in r.json()["error"]["message"] and "--allowed-hosts" in r.json()["error"]["message"]
    port = url.rsplit(":", 1)[1]
    for host in ("localhost", f"localhost:{port}", f"127.0.0.1:{port}", "[::1]", "LOCALHOST", "models.example:8443"):
        r = httpx.request(method, f"{url}{path}", json=body, headers={"Host": host}, timeout=60)
        assert r.status_code == 200, (host, r.text)


def test_matching_rules():
    hosts = HostAllowList(None, ("localhost", "[::1]", "api.example:8000"))
    assert hosts.is_allowed("localhost:1234") and hosts.is_allowed("[::1]:8000") and hosts.is_allowed("[::1]")
    assert hosts.is_allowed("api.example:8000") and not hosts.is_allowed("api.example:8001")
    assert not hosts.is_allowed("api.example") and not hosts.is_allowed("") and not hosts.is_allowed("::1")
    assert HostAllowList(None, ("*",)).is_allowed("anything.example")


def test_defaults_follow_the_bind_address():
    for loopback in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert default_allowed_hosts(loopback) == LOOPBACK_NAMES
    for exposed in ("0.0.0.0", "::", "192.168.1.10", "myhost.lan"):
        assert default_allowed_hosts(exposed) is None  # any host: the operator chose to expose it
    assert allowed_hosts(argparse.Namespace(allowed_hosts=None, host="127.0.0.1")) == LOOPBACK_NAMES
    given = argparse.Namespace(allowed_hosts="Models.example, [::1]:8000", host="127.0.0.1")
    assert allowed_hosts(given) == ("models.example", "[::1]:8000")
    assert parse_allowed_hosts("*") == ("*",)
    for bad in ("a b", "a,,b", "http://a", ""):
        with pytest.raises(TinyLLMError, match="--allowed-hosts"):
            allowed_hosts(argparse.Namespace(allowed_hosts=bad, host="0.0.0.0"))


def get(port: int, host: str) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models", headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.slow
def test_serve_on_loopback_answers_the_loopback_names_only(tmp_path):
    folder = write_hf_folder(random_tiny_llama(3, max_position_embeddings=64), str(tmp_path / "tiny"))
    with serve("--model", folder, "--kv-memory-gb", "0.01") as port:
        assert get(port, f"127.0.0.1:{port}") == 200 and get(port, f"localhost:{port}") == 200
        assert get(port, "rebound.example") == 400
