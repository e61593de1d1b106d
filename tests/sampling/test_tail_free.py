"""sampling/tail_free.py against a plain per-token twin: sort, second differences, normalise, cut where their
running sum first passes z (never before the second token); rows alone equal rows batched; 1 changes nothing;
a value outside (0, 1] is refused."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm.errors import TinyLLMError
from tinyllm.sampling.filters import process_logits
from tinyllm.sampling.params import SamplingParams
from tinyllm.sampling.tail_free import tail_free_filter


def plain_tail_free(logits: list[float], z: float) -> tuple[list[bool], float]:
    """Which tokens stay, in float64, and the least gap between a running sum and z (where rounding decides)."""
    live = [i for i, x in enumerate(logits) if x > -math.inf]
    if len(live) <= 2:
        return [x > -math.inf for x in logits], math.inf
    order = sorted(live, key=lambda i: (-logits[i], i))
    top = max(logits)
    total = sum(math.exp(logits[i] - top) for i in live)
    p = [math.exp(logits[i] - top) / total for i in order]
    first = [p[i] - p[i + 1] for i in range(len(p) - 1)]
    second = [abs(first[i] - first[i + 1]) for i in range(len(first) - 1)]
    weight_sum = sum(second)
    weights = [w / weight_sum for w in second] if weight_sum > 1e-6 else [1 / len(second)] * len(second)
    num_keep, running, margin = len(order), 0.0, abs(weight_sum - 1e-6)
    for i, w in enumerate(weights):
        running += w
        margin = min(margin, abs(running - z))
        if running > z and i >= 1:
            num_keep = i
            break
    kept = set(order[:num_keep])
    return [i in kept for i in range(len(logits))], margin


@settings(max_examples=200, deadline=None)
@given(
    logits=st.lists(st.floats(-8, 8, allow_nan=False, width=32) | st.just(-math.inf), min_size=1, max_size=30).filter(
        lambda xs: max(xs) > -math.inf
    ),
    z=st.floats(0.01, 0.999),
)
def test_tail_free_keeps_what_the_plain_twin_keeps(logits, z):
    got = tail_free_filter(torch.tensor(logits), z)
    expected, margin = plain_tail_free(logits, z)
    kept = [bool(x > -math.inf) for x in got.tolist()]
    assert kept == expected or margin < 1e-9
    assert sum(kept) >= 1
    assert [g for g, k in zip(got.tolist(), kept) if k] == [x for x, k in zip(logits, kept) if k]  # values untouched


def test_a_worked_row():
    # sorted 0.4, 0.2, 0.15, 0.12, 0.08, 0.05: first differences .2, .05, .03, .04, .03; second .15, .02, .01, .01,
    # weights .789, .105, .053, .053, running sums .789, .895, .947, 1: the cut is the first index past z (>= 1),
    # so the last weight's two tokens always go
    logits = torch.tensor([0.12, 0.4, 0.05, 0.2, 0.08, 0.15]).log()
    for z, expected in ((0.5, {1}), (0.9, {1, 3}), (0.95, {1, 3, 5}), (0.999, {1, 3, 5})):
        kept = {i for i, x in enumerate(tail_free_filter(logits, z).tolist()) if x > -math.inf}
        assert kept == expected, z
    straight = torch.tensor([0.3, 0.25, 0.2, 0.15, 0.1]).log()  # no curvature: weights 1/3 each
    for z in (0.7, 0.9):  # running sums 1/3, 2/3, 1: both cut at the third weight
        kept = [x > -math.inf for x in tail_free_filter(straight, z).tolist()]
        assert kept == [True, True, False, False, False]


def test_rows_alone_equal_rows_batched_and_one_changes_nothing():
    rows = torch.randn(5, 300, generator=torch.Generator().manual_seed(2)) * 3
    batched = tail_free_filter(rows, 0.9)
    assert len(set((batched > -math.inf).sum(-1).tolist())) > 2  # rows cut at their own places
    for i in range(5):
        assert torch.equal(tail_free_filter(rows[i], 0.9), batched[i])
    assert torch.equal(tail_free_filter(rows, 1.0), rows)


def test_tfs_z_is_checked_and_reaches_sampling():
    for bad in (0, -0.5, 1.5, math.nan):
        with pytest.raises(TinyLLMError, match="tfs_z must be in \\(0, 1\\]"):
            SamplingParams(tfs_z=bad)
    with pytest.raises(TinyLLMError, match=r"tfs_z must be in \(0, 1\], got 0.0"):
        tail_free_filter(torch.zeros(4), 0.0)
    logits = torch.tensor([0.12, 0.4, 0.05, 0.2, 0.08, 0.15]).log()
    out = process_logits(logits, SamplingParams(tfs_z=0.9), [], [])
    assert [x > -math.inf for x in out.tolist()] == [False, True, False, True, False, False]  # in the stack
