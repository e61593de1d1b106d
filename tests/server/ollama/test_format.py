"""`format` with a JSON schema on Ollama's routes: an object that does not state additionalProperties is closed,
as Ollama (llama.cpp's schema converter) reads it, so the schemas its clients send (pydantic's
`model_json_schema()`, which never states it) give answers that parse, with no keys but the schema's."""

import json
from typing import Literal

import httpx
import pytest
from pydantic import BaseModel

from helpers.bigram_model import scripted_llama
from helpers.live_server import tiny_llm
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

ollama = pytest.importorskip("ollama")

MODEL = "tiny"
HI = [{"role": "user", "content": "Describe a pet."}]


class Pet(BaseModel):  # no free text: a random model's strings would run to num_predict
    kind: Literal["cat", "dog"]
    legs: int
    vaccinated: bool


class Paws(BaseModel):
    legs: int


@pytest.fixture(scope="module")
def server(smollm_tokenizer, one_thread):
    with ServerThread(create_app(tiny_llm(smollm_tokenizer), served_model_name=MODEL, num_blocks=256)) as srv:
        yield srv.wait_ready()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_pydantic_schema_is_closed_and_the_answer_parses(server, seed):
    schema = Pet.model_json_schema()
    assert "additionalProperties" not in schema  # what every Ollama client sends
    r = ollama.Client(host=server.url).chat(MODEL, HI, format=schema, options={"seed": seed, "num_predict": 400})
    assert r.done_reason == "stop", r.message.content  # the object closed by itself, not cut by num_predict
    Pet.model_validate_json(r.message.content)
    assert set(json.loads(r.message.content)) <= {"kind", "legs", "vaccinated"}


def test_format_is_the_openai_routes_strict_schema(server):
    """The same text as /v1/chat/completions with strict: true, and as an Ollama schema that closes itself."""
    schema = Pet.model_json_schema()
    closed = {**schema, "additionalProperties": False}
    with httpx.Client(base_url=server.url, timeout=120) as http:
        ours = http.post(
            "/api/chat",
            json={
                "model": MODEL,
                "messages": HI,
                "format": schema,
                "stream": False,
                "options": {"seed": 7, "num_predict": 200},
            },
        ).json()["message"]["content"]
        spec = {"name": "pet", "schema": schema, "strict": True}
        body = {
            "messages": HI,
            "seed": 7,
            "max_tokens": 200,
            "response_format": {"type": "json_schema", "json_schema": spec},
        }
        strict = http.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
        explicit = http.post(
            "/api/generate",
            json={
                "model": MODEL,
                "prompt": HI[0]["content"],
                "format": closed,
                "stream": False,
                "options": {"seed": 7, "num_predict": 200},
            },
        )
    assert ours == strict
    assert explicit.json()["response"] == ours


def test_a_model_that_would_add_a_key_is_held_to_the_schemas_keys(smollm_tokenizer, one_thread):
    """A model scripted to write one key more than the schema names ends the object where the schema does."""
    newline = smollm_tokenizer.encode("\n", add_special_tokens=False)[-1]  # the chat template's last token
    text = '{"legs":4,"color":"red"}'  # each token with one successor, as the scripted model needs
    model = scripted_llama(smollm_tokenizer, text, after=newline, max_position_embeddings=1024)
    app = create_app(LLM.from_parts(model, smollm_tokenizer), served_model_name=MODEL)
    with ServerThread(app) as srv:
        client = ollama.Client(host=srv.wait_ready().url)
        free = client.chat(MODEL, HI, options={"num_predict": 40, "temperature": 0})
        held = client.chat(MODEL, HI, format=Paws.model_json_schema(), options={"num_predict": 40, "temperature": 0})
    assert free.message.content == text  # what the model writes unconstrained
    assert list(json.loads(held.message.content)) == ["legs"] and held.done_reason == "stop", held.message.content
