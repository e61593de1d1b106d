"""sampling/typical.py against a plain per-token twin: the tokens nearest the entropy in surprise, nearest first
(ties in vocabulary order), up to and including the one that brings the mass to typical_p; rows alone equal rows
batched; 1 changes nothing; a value outside (0, 1] is refused."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm.errors import TinyLLMError
from tinyllm.sampling.filters import process_logits
from tinyllm.sampling.params import SamplingParams
from tinyllm.sampling.typical import typical_filter


def plain_typical(logits: list[float], typical_p: float) -> tuple[list[bool], float]:
    """Which tokens stay, computed token by token in float64, and how close the cut came to being ambiguous:
    the least gap between two distances or between a mass and typical_p (float32 may cut otherwise there)."""
    top = max(logits)
    weights = [math.exp(x - top) if x > -math.inf else 0.0 for x in logits]
    total = sum(weights)
    probs = [w / total for w in weights]
    entropy = -sum(p * math.log(p) for p in probs if p > 0)
    distance = [abs(-math.log(p) - entropy) if p > 0 else math.inf for p in probs]
    order = sorted(range(len(logits)), key=lambda i: (distance[i], i))
    keep, mass, margin = [False] * len(logits), 0.0, math.inf
    for a, b in zip(order, order[1:]):
        if probs[a] > 0 and probs[b] > 0:
            margin = min(margin, distance[b] - distance[a])
    for i in order:
        margin = min(margin, abs(mass - typical_p))
        if mass >= typical_p:
            break
        keep[i] = probs[i] > 0
        mass += probs[i]
    return keep, margin


@settings(max_examples=200, deadline=None)
@given(
    logits=st.lists(st.floats(-8, 8, allow_nan=False) | st.just(-math.inf), min_size=2, max_size=24).filter(
        lambda xs: any(x > -math.inf for x in xs)
    ),
    typical_p=st.floats(0.05, 0.999),
)
def test_typical_keeps_what_the_plain_twin_keeps(logits, typical_p):
    got = typical_filter(torch.tensor(logits), typical_p)
    expected, margin = plain_typical(logits, typical_p)
    kept = [bool(x > -math.inf) for x in got.tolist()]
    assert kept == expected or margin < 1e-5  # float32 may cut otherwise only where the cut is a near tie
    original = torch.tensor(logits).tolist()  # as float32 holds them
    assert [g == x for g, x, k in zip(got.tolist(), original, kept) if k] == [True] * sum(kept)


def test_a_worked_row():
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])
    entropy = float(-(probs * probs.log()).sum())  # 1.2799
    distance = (-probs.log() - entropy).abs()  # 0.364, 0.076, 0.330, 1.023
    assert distance.argsort().tolist() == [1, 2, 0, 3]
    out = typical_filter(probs.log(), 0.45)  # 0.3, then 0.2 reaches 0.5 >= 0.45
    assert [x > -math.inf for x in out.tolist()] == [False, True, True, False]
    out = typical_filter(probs.log(), 0.25)  # 0.3 alone reaches it
    assert [x > -math.inf for x in out.tolist()] == [False, True, False, False]


def test_rows_alone_equal_rows_batched_and_one_changes_nothing():
    rows = torch.randn(5, 300, generator=torch.Generator().manual_seed(3))
    batched = typical_filter(rows, 0.7)
    for i in range(5):
        assert torch.equal(typical_filter(rows[i], 0.7), batched[i])
    assert torch.equal(typical_filter(rows, 1.0), rows)


def test_typical_p_is_checked_and_reaches_sampling():
    for bad in (0, -0.5, 1.5, math.nan):
        with pytest.raises(TinyLLMError, match="typical_p must be in \\(0, 1\\]"):
            SamplingParams(typical_p=bad)
    logits = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    out = process_logits(logits, SamplingParams(typical_p=0.25, temperature=1.0), [], [])
    assert [x > -math.inf for x in out.tolist()] == [False, True, False, False]  # in the sampling stack


def test_the_filter_checks_its_own_argument_and_cuts_at_an_exact_mass():
    for bad in (0.0, 1.5):
        with pytest.raises(TinyLLMError, match=rf"typical_p must be in \(0, 1\], got {bad}"):
            typical_filter(torch.zeros(4), bad)
    # two equal halves: the first reaches 0.5 exactly, so the second (mass before it 0.5) is dropped
    out = typical_filter(torch.zeros(2), 0.5)
    assert [x > -math.inf for x in out.tolist()] == [True, False]
