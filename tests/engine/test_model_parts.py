"""ModelParts: the engine is built from a loaded model's parts alone, never from the LLM facade."""

import dataclasses
import random

import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, SamplingParams, TinyLLMError
from tinyllm.engine.engine import Engine
from tinyllm.engine.model_parts import ModelParts
from tinyllm.grammar.constraint import Grammars

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def model(smollm_tokenizer):
    return tiny_llama(23, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=128)


@pytest.fixture(scope="module")
def llm(model, smollm_tokenizer):
    return LLM.from_parts(model, smollm_tokenizer)


def parts_of(model, tokenizer) -> ModelParts:
    eos_ids = tokenizer.stop_ids
    return ModelParts(model, tokenizer, model.config, eos_ids, Grammars(tokenizer, model.config.vocab_size, eos_ids))


def test_an_engine_of_parts_made_by_hand_generates_as_the_llm(llm, model, smollm_tokenizer):
    rng = random.Random(3)
    prompts = [[rng.randrange(3, 49152) for _ in range(rng.randint(3, 30))] for _ in range(4)]
    engine = Engine(parts_of(model, smollm_tokenizer), max_num_batched_tokens=2048)  # as the LLM's own engine
    by_hand = engine.generate(prompts, GREEDY)
    assert [g.ids for g in by_hand] == [g.ids for g in llm.generate(prompts, params=GREEDY)]


def test_llm_parts_are_the_llms_own(llm):
    parts = llm.parts
    assert (parts.model, parts.tokenizer, parts.config) == (llm.model, llm.tokenizer, llm.config)
    assert parts.eos_ids == llm.eos_ids and parts.tensor_parallel is None
    assert parts.grammars is llm.grammars  # a grammar compiles once for the LLM, its engines and the server
    assert llm.engine().grammars is llm.grammars


def test_engine_takes_parts_not_an_llm(llm):
    with pytest.raises(TinyLLMError, match=r"Engine takes a ModelParts \(an LLM's \.parts\), got LLM"):
        Engine(llm)


def test_parts_are_frozen_and_check_their_eos_ids(model, smollm_tokenizer):
    parts = parts_of(model, smollm_tokenizer)
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts.eos_ids = (0,)
    with pytest.raises(ValueError, match=r"eos_ids must be a tuple of token ids, got \[2\]"):
        dataclasses.replace(parts, eos_ids=[2])
