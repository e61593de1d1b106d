"""logit_bias: validation in SamplingParams, where it enters the logits pipeline, and the sampler honouring it."""

import re

import pytest
import torch

from tinyllm import SamplingParams, TinyLLMError
from tinyllm.sampling.filters import process_logits
from tinyllm.sampling.logit_bias import MAX_LOGIT_BIAS_ENTRIES, apply_logit_bias, check_logit_bias_ids
from tinyllm.sampling.rng import request_rng
from tinyllm.sampling.sampler import sample, sample_batch


def test_a_map_is_normalised_to_sorted_pairs_and_compares_by_value():
    p = SamplingParams(logit_bias={7: 1, 2: -3.5})
    assert p.logit_bias == ((2, -3.5), (7, 1.0))
    assert p == SamplingParams(logit_bias=[(7, 1.0), (2, -3.5)])
    assert hash(p) == hash(SamplingParams(logit_bias={2: -3.5, 7: 1}))


@pytest.mark.parametrize(
    "bad, words",
    [
        ({-1: 1.0}, "token ids"),
        ({True: 1.0}, "token ids"),
        ({"5": 1.0}, "token ids"),
        ({1.5: 1.0}, "token ids"),
        ({5: 100.5}, "[-100, 100]"),
        ({5: float("nan")}, "[-100, 100]"),
        ({5: float("inf")}, "[-100, 100]"),
        ({5: True}, "[-100, 100]"),
        (dict.fromkeys(range(MAX_LOGIT_BIAS_ENTRIES + 1), 1.0), "at most 300"),
        (5, "must map"),
    ],
)
def test_bad_maps_are_refused_naming_logit_bias(bad, words):
    with pytest.raises(TinyLLMError, match="logit_bias") as info:
        SamplingParams(logit_bias=bad)
    assert words in str(info.value)


def test_ids_beyond_the_vocabulary_are_refused():
    check_logit_bias_ids(((9, 1.0),), 10)
    with pytest.raises(TinyLLMError, match="token 10, but the vocabulary has 10"):
        check_logit_bias_ids(((3, 1.0), (10, 1.0)), 10)


def test_bias_is_added_to_the_raw_logits_without_touching_the_input():
    logits = torch.tensor([1.0, -2.0, 3.0, 0.5])
    out = apply_logit_bias(logits, ((1, 5.0), (3, -100.0)))
    assert torch.equal(out, torch.tensor([1.0, 3.0, 3.0, -99.5]))
    assert torch.equal(logits, torch.tensor([1.0, -2.0, 3.0, 0.5]))
    assert apply_logit_bias(logits, ()) is logits


def test_applying_an_id_beyond_the_logits_is_refused_naming_it():
    with pytest.raises(TinyLLMError, match=re.escape("logit_bias names token 4, beyond the logits' 4 tokens")):
        apply_logit_bias(torch.zeros(4), ((1, 1.0), (4, 1.0)))


def test_bias_comes_before_the_repetition_penalty():
    # Raw 1 biased by -3 is -2, which the penalty multiplies to -4; penalising first would give 0.5 - 3.
    logits = torch.tensor([0.0, 1.0, 0.0])
    p = SamplingParams(temperature=0, repetition_penalty=2.0, logit_bias={1: -3.0})
    out = process_logits(logits, p, prompt_ids=[1], generated_ids=[])
    assert out[1].item() == -4.0


def test_the_sampler_honours_bias_on_the_greedy_and_the_sampled_path():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 50, generator=gen)
    top = int(logits[0].argmax())
    banned = SamplingParams(temperature=0, logit_bias={top: -100})
    forced = SamplingParams(temperature=1.0, seed=4, logit_bias={17: 100})
    rngs = [request_rng(0), request_rng(4)]
    a, b = sample_batch(logits, [banned, forced], [[], []], [[], []], rngs, [0, 0])
    assert a.token != top and b.token == 17
    assert a == sample(logits[0], banned, prompt_ids=[], generated_ids=[], rng=rngs[0], position=0)
