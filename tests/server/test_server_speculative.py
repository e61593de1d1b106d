"""A server started with speculative decoding answers exactly what a plain server answers."""

import openai
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread
from tinyllm.speculative.proposer import SpeculativeConfig

PROMPT = "one two three one two three one two"


def completions(llm, **engine_options):
    app = create_app(llm, served_model_name="tiny", num_blocks=128, **engine_options)
    with ServerThread(app) as srv:
        client = openai.OpenAI(base_url=f"{srv.wait_ready().url}/v1", api_key="x", max_retries=0, timeout=60)
        out = []
        for temperature in (0.0, 0.9):
            r = client.completions.create(
                model="tiny",
                prompt=PROMPT,
                max_tokens=16,
                temperature=temperature,
                seed=5,
                extra_body={"ignore_eos": True},
            )
            out.append(r.choices[0].text)
        return out


@pytest.mark.slow
def test_speculative_server_answers_like_the_plain_one(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(61, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=256), smollm_tokenizer
    )
    plain = completions(llm)
    assert completions(llm, speculative=SpeculativeConfig("ngram", num_draft_tokens=3)) == plain
    assert completions(llm, speculative=SpeculativeConfig("draft", num_draft_tokens=2, draft_layers=1)) == plain
