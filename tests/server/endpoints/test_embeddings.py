"""/v1/embeddings through the openai SDK (which asks for base64 unless told otherwise) and LangChain's
OpenAIEmbeddings: the vectors are LLM.embed's; the OpenAI shape, token ids as input, the extras, and the limits."""

import base64
import re

import httpx
import numpy as np
import openai
import pytest
import torch

from helpers.live_server import tiny_llm
from tinyllm.engine.embedding_queue import EmbeddingLimits
from tinyllm.server import create_app
from tinyllm.server.checks.embeddings import MAX_INPUTS
from tinyllm.server.transport.server_thread import ServerThread

MODEL = "tiny"
MAX_TOTAL_TOKENS = EmbeddingLimits().max_request_tokens
TEXTS = ["The cat sat on the mat.", "A dog.", "x" * 300]


@pytest.fixture(scope="module")
def llm(smollm_tokenizer, one_thread):
    return tiny_llm(smollm_tokenizer)


@pytest.fixture(scope="module")
def server(llm):
    with ServerThread(create_app(llm, served_model_name=MODEL)) as srv:
        yield srv.wait_ready()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


def test_the_sdk_gets_llm_embed_in_openais_shape(client, llm):
    r = client.embeddings.create(model=MODEL, input=TEXTS)  # base64 on the wire
    assert r.object == "list" and r.model == MODEL and [d.index for d in r.data] == [0, 1, 2]
    got = torch.tensor([d.embedding for d in r.data])
    torch.testing.assert_close(got, llm.embed(TEXTS), atol=1e-6, rtol=0)
    tokens = sum(len(llm.tokenizer.encode(t)) for t in TEXTS)
    assert (r.usage.prompt_tokens, r.usage.total_tokens) == (tokens, tokens)
    floats = client.embeddings.create(model=MODEL, input=TEXTS[1], encoding_format="float")
    torch.testing.assert_close(torch.tensor(floats.data[0].embedding), llm.embed(TEXTS[1]), atol=1e-6, rtol=0)


def test_base64_is_little_endian_float32(server, llm):
    r = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x").embeddings.with_raw_response.create(
        model=MODEL, input="A dog.", encoding_format="base64"
    )
    raw = r.http_response.json()["data"][0]["embedding"]
    vector = np.frombuffer(base64.b64decode(raw), dtype="<f4")
    torch.testing.assert_close(torch.from_numpy(vector.copy()), llm.embed("A dog."), atol=0, rtol=0)


def test_token_ids_and_the_pooling_extras(client, llm):
    ids = [llm.tokenizer.encode(t) for t in TEXTS[:2]]
    r = client.embeddings.create(model=MODEL, input=ids, extra_body={"pooling": "last", "normalize": False})
    want = llm.embed(TEXTS[:2], pooling="last", normalize=False)
    torch.testing.assert_close(torch.tensor([d.embedding for d in r.data]), want, atol=1e-5, rtol=0)


def test_dimensions_is_refused_unless_it_is_the_models_width(client, llm):
    width = llm.config.hidden_size
    assert len(client.embeddings.create(model=MODEL, input="a", dimensions=width).data[0].embedding) == width
    with pytest.raises(openai.BadRequestError, match=f"dimensions 8 is not supported.*have {width} dimensions"):
        client.embeddings.create(model=MODEL, input="a", dimensions=8)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"input": []}, "input is an empty list"),
        ({"input": ["a", ""]}, r"input\[1\] is empty"),
        ({"input": [[1, 2], [10**7]]}, r"input\[1\] has token id 10000000, outside the vocabulary"),
        ({"input": ["a"] * (MAX_INPUTS + 1)}, f"more than the limit of {MAX_INPUTS}"),
        ({"input": [[1] * 1025]}, r"input\[0\] has 1025 tokens, more than the model's context length of 1024"),
        ({"input": [[5] * 1000] * (MAX_TOTAL_TOKENS // 1000 + 1)}, f"more than the limit of {MAX_TOTAL_TOKENS}"),
        ({"input": "a", "pooling": "max"}, "pooling must be 'mean' or 'last'"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "model": "other"}, "the model 'other' was not found"),
    ],
)
def test_what_cannot_be_embedded_is_refused(server, body, message):
    r = httpx.post(f"{server.url}/v1/embeddings", json={"model": MODEL, **body}, timeout=60)
    assert r.status_code == (404 if "model" in body else 400)
    assert re.search(message, r.json()["error"]["message"])


def test_langchain_openai_embeddings(server, llm):
    langchain_openai = pytest.importorskip("langchain_openai")
    # check_embedding_ctx_length=False: LangChain would otherwise send OpenAI's tiktoken ids, not text
    embeddings = langchain_openai.OpenAIEmbeddings(
        model=MODEL, base_url=f"{server.url}/v1", api_key="x", check_embedding_ctx_length=False
    )
    torch.testing.assert_close(torch.tensor(embeddings.embed_documents(TEXTS)), llm.embed(TEXTS), atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.tensor(embeddings.embed_query("A dog.")), llm.embed("A dog."), atol=1e-6, rtol=0)


def test_a_body_nested_too_deep_is_a_400_naming_the_field(server):
    deep = "[" * 2000 + "]" * 2000
    r = httpx.post(
        f"{server.url}/v1/embeddings",
        content='{"input": "a", "extra": ' + deep + "}",
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "extra"
    assert "limit of 64 levels" in r.json()["error"]["message"]
