"""Constraint: the grammar matcher as a function of the generated ids (forward, rollback, EOS only when the
grammar accepts) and the errors of grammars that cannot compile; on the real SmolLM2 vocabulary."""

import random

import pytest
import torch

from tinyllm import SamplingParams, StructuredOutput, TinyLLMError
from tinyllm.grammar.constraint import Grammars
from tinyllm.sampling.rng import request_rng
from tinyllm.sampling.sampler import sample

STOP_IDS = (0, 2)


@pytest.fixture(scope="module")
def grammars(smollm_tokenizer):
    return Grammars(smollm_tokenizer, smollm_tokenizer.vocab_size, STOP_IDS)


def allowed_ids(constraint, history):
    return torch.nonzero(constraint.allowed(history)).flatten().tolist()


def test_a_regex_allows_exactly_its_continuations_and_eos_only_at_its_end(grammars, smollm_tokenizer):
    tok = smollm_tokenizer
    c = grammars.constraint(StructuredOutput.regex("ab|cd"))
    assert sorted(tok.decode([i]) for i in allowed_ids(c, [])) == ["a", "ab", "c", "cd"]
    a = tok.encode("a", add_special_tokens=False)
    assert [tok.decode([i]) for i in allowed_ids(c, a)] == ["b"]
    assert allowed_ids(c, a + tok.encode("b", add_special_tokens=False)) == list(STOP_IDS)


def test_the_mask_follows_history_back_and_forth_like_a_fresh_matcher(grammars, smollm_tokenizer):
    structured = StructuredOutput.json_schema(
        {
            "type": "object",
            "properties": {"xs": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}},
            "required": ["xs"],
        }
    )
    ids = smollm_tokenizer.encode('{"xs":[12,7,301]}', add_special_tokens=False)
    walker = grammars.constraint(structured)
    rng = random.Random(0)
    for _ in range(30):  # jump to random prefixes: forward, back (rejected drafts), and forward again
        n = rng.randint(0, len(ids))
        fresh = grammars.constraint(structured)
        assert torch.equal(walker.allowed(ids[:n]), fresh.allowed(ids[:n]))
    assert allowed_ids(walker, ids) == list(STOP_IDS)


def test_the_sampler_only_draws_allowed_tokens_even_against_a_strong_bias(grammars, smollm_tokenizer):
    c = grammars.constraint(StructuredOutput.regex("[0-9]"))
    logits = torch.zeros(smollm_tokenizer.vocab_size)  # [V]
    p = SamplingParams(temperature=0, logit_bias={smollm_tokenizer.encode("x", False)[0]: 100})
    got = sample(logits, p, prompt_ids=[1], generated_ids=[], rng=request_rng(0), position=0, constraint=c)
    assert smollm_tokenizer.decode([got.token]) in "0123456789"
    assert got.logprob == pytest.approx(-torch.log(torch.tensor(10.0)).item(), abs=1e-5)  # 10 digits left


@pytest.mark.parametrize(
    "structured, message",
    [
        (StructuredOutput.json_schema({"type": "nope"}), "the json_schema cannot be compiled: .*nope"),
        (StructuredOutput.regex("a("), "the regex cannot be compiled: .*unclosed group"),
        (StructuredOutput.grammar("start: foo"), "the grammar cannot be compiled: .*unknown name"),
    ],
)
def test_what_cannot_compile_is_a_one_line_error(grammars, structured, message):
    with pytest.raises(TinyLLMError, match=message) as info:
        grammars.compile(structured)
    assert "\n" not in str(info.value)
