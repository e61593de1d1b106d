"""/api/embed's `dimensions` below the model's width: each vector cut to its first that many values and normalized
again, as Ollama does; the model's own width is the whole vector, and a width outside [1, C] is a 400."""

import httpx
import pytest
import torch

from helpers.live_server import tiny_llm
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

ollama = pytest.importorskip("ollama")

TEXTS = ["the sea", "a river runs"]


@pytest.fixture(scope="module")
def served(smollm_tokenizer, one_thread):
    llm = tiny_llm(smollm_tokenizer)
    with ServerThread(create_app(llm, served_model_name="tiny", num_blocks=64)) as srv:
        yield srv.wait_ready().url, llm.config.hidden_size


def test_a_smaller_width_is_the_vectors_start_normalized_again(served):
    url, width = served
    client = ollama.Client(host=url)
    whole = torch.tensor(client.embed("tiny", TEXTS).embeddings)  # [2, C]
    assert whole.shape == (2, width)
    assert torch.equal(torch.tensor(client.embed("tiny", TEXTS, dimensions=width).embeddings), whole)
    short = torch.tensor(client.embed("tiny", TEXTS, dimensions=8).embeddings)  # [2, 8]
    assert short.shape == (2, 8)
    torch.testing.assert_close(short, torch.nn.functional.normalize(whole[:, :8], dim=-1), rtol=0, atol=1e-6)
    torch.testing.assert_close(short.norm(dim=-1), torch.ones(2))


@pytest.mark.parametrize("bad", [0, -3, "wide", 10**6])
def test_a_width_outside_the_models_is_a_400_naming_it(served, bad):
    url, width = served
    r = httpx.post(f"{url}/api/embed", json={"model": "tiny", "input": "x", "dimensions": bad}, timeout=60)
    assert r.status_code == 400 and "dimensions" in r.json()["error"], r.text
