"""Penalties, temperature, top-k, top-p and min-p: worked numbers, order, properties."""

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tinyllm.errors import TinyLLMError
from tinyllm.sampling import (
    SamplingParams,
    apply_penalties,
    apply_temperature,
    min_p_filter,
    process_logits,
    top_k_filter,
    top_p_filter,
)

PROBS = [0.5, 0.25, 0.15, 0.06, 0.04]  # seed 002's worked example
LOGITS = torch.tensor(PROBS).log()
NEG_INF = float("-inf")


def kept(logits: torch.Tensor) -> list[int]:
    return torch.isfinite(logits).nonzero().flatten().tolist()


# -- seed 002's worked numbers -------------------------------------------------------


@pytest.mark.parametrize(
    ("top_p", "expected"),
    [
        (0.5, [0]),  # the mass before token 1 is 0.5, already >= 0.5
        (0.6, [0, 1]),  # token 1 crosses 0.6 and is kept
        (0.75, [0, 1]),  # mass before token 2 is exactly 0.75
        (0.9, [0, 1, 2]),  # mass before token 3 is 0.9 >= 0.9: dropped
        (0.95, [0, 1, 2, 3]),
        (0.97, [0, 1, 2, 3, 4]),
        (1.0, [0, 1, 2, 3, 4]),
    ],
)
def test_top_p_worked_numbers(top_p, expected):
    out = top_p_filter(LOGITS, top_p)
    assert kept(out) == expected
    assert torch.equal(out[expected], LOGITS[expected])  # kept logits untouched


@pytest.mark.parametrize("top_p", [0.5, 0.6, 0.75, 0.9, 0.95])
def test_top_p_works_on_unsorted_rows(top_p):
    expected = set(kept(top_p_filter(LOGITS, top_p)))
    for seed in range(10):
        perm = torch.randperm(5, generator=torch.Generator().manual_seed(seed))
        out = top_p_filter(LOGITS[perm], top_p)
        assert {int(perm[i]) for i in kept(out)} == expected


def test_top_p_always_keeps_the_argmax_even_for_tiny_p():
    row = torch.tensor([0.1, 0.3, 2.0, 1.9, -1.0])
    assert kept(top_p_filter(row, 1e-9)) == [2]
    assert kept(top_p_filter(row.flip(0), 1e-9)) == [2]


def test_top_p_orders_by_logit_when_probabilities_round_equal():
    # these logits differ, but their float32 probabilities are equal: the argmax still wins
    assert kept(top_p_filter(torch.tensor([-1.4e-45, 0.0]), 0.5)) == [1]
    assert kept(top_p_filter(torch.tensor([0.0, -2.2e-16, 0.0]), 0.5)) == [0, 2]
    row = torch.tensor([-4.2e-45, -2.8e-45, -1.4e-45, 0.0])  # four probabilities of exactly 1/4
    assert len(set(row.tolist())) == 4
    assert kept(top_p_filter(row, 0.3)) == [2, 3]
    assert kept(top_p_filter(row.flip(0), 0.3)) == [0, 1]


def test_top_p_ties_at_the_edge_keep_lowest_indices():
    # uniform over 4: the mass before the third is 0.5, so exactly two survive
    assert kept(top_p_filter(torch.zeros(4), 0.5)) == [0, 1]
    row = torch.tensor([0.0, 1.0, 0.0, 0.0])  # two slots must come from the tied zeros
    p = torch.softmax(row, -1)
    assert kept(top_p_filter(row, float(p[1] + p[0]) + 0.01)) == [0, 1, 2]


def test_top_p_wide_nucleus_beyond_the_first_candidates():
    # 1000 equal tokens: the nucleus (500) is wider than the first topk window
    out = top_p_filter(torch.zeros(1000), 0.5)
    assert kept(out) == list(range(500))
    row = torch.randn(3000, generator=torch.Generator().manual_seed(0)) * 0.1
    assert set(kept(top_p_filter(row, 0.9))) == set(_reference_top_p(row, 0.9))


def test_min_p_worked_numbers():
    assert kept(min_p_filter(LOGITS, 0.2)) == [0, 1, 2]  # threshold 0.2 * 0.5 = 0.1
    assert kept(min_p_filter(LOGITS, 0.5)) == [0, 1]  # 0.25 >= 0.5 * 0.5: kept
    assert kept(min_p_filter(LOGITS, 1.0)) == [0]
    assert kept(min_p_filter(LOGITS, 0.0)) == [0, 1, 2, 3, 4]


def test_top_k_renormalises_to_two_thirds_one_third():
    probs = torch.softmax(top_k_filter(LOGITS, 2), dim=-1)
    assert torch.allclose(probs, torch.tensor([2 / 3, 1 / 3, 0, 0, 0]), atol=1e-6)


def test_top_k_keeps_ties_at_the_boundary():
    row = torch.tensor([1.0, 3.0, 3.0, 2.0, 3.0])
    assert kept(top_k_filter(row, 2)) == [1, 2, 4]
    assert kept(top_k_filter(torch.tensor([5.0, 4.0, 4.0, 4.0, 1.0]), 2)) == [0, 1, 2, 3]
    assert kept(top_k_filter(row, 0)) == [0, 1, 2, 3, 4]  # 0 disables
    assert kept(top_k_filter(row, 99)) == [0, 1, 2, 3, 4]


def test_filters_work_on_batches_row_by_row():
    perm = torch.tensor([3, 0, 4, 1, 2])
    rows = torch.stack([LOGITS, LOGITS[perm], torch.zeros(5)])  # [3, 5]
    for filt, arg in ((top_p_filter, 0.6), (top_k_filter, 2), (min_p_filter, 0.2)):
        out = filt(rows, arg)
        assert out.shape == rows.shape
        for b in range(3):
            assert torch.equal(out[b], filt(rows[b], arg))


def test_filters_reject_bad_arguments():
    with pytest.raises(ValueError, match="top_p"):
        top_p_filter(LOGITS, 0.0)
    with pytest.raises(ValueError, match="top_k"):
        top_k_filter(LOGITS, -1)
    with pytest.raises(ValueError, match="min_p"):
        min_p_filter(LOGITS, 1.5)
    with pytest.raises(ValueError, match="temperature"):
        apply_temperature(LOGITS, 0.0)
    with pytest.raises(ValueError, match="logits"):
        top_k_filter(torch.tensor([1, 2, 3]), 1)
    with pytest.raises(TinyLLMError) as info:  # one request's logits: a row, not a batch
        process_logits(torch.zeros(2, 3), SamplingParams(), prompt_ids=[], generated_ids=[])
    assert str(info.value) == "logits must have shape [V] with V >= 1, got (2, 3)"


# -- temperature and the order of operations ----------------------------------------


def test_temperature_divides_the_logits():
    out = apply_temperature(LOGITS, 2.0)
    assert torch.allclose(torch.softmax(out, -1), torch.softmax(LOGITS / 2.0, -1), atol=1e-7)
    assert torch.allclose(out - out.max(), LOGITS / 2.0 - (LOGITS / 2.0).max(), atol=1e-6)


def test_tiny_temperature_does_not_overflow_to_nan():
    out = apply_temperature(torch.tensor([1.0, 2.0, -3.0]), 1e-30)
    assert not torch.isnan(out).any() and int(out.argmax()) == 1


def _kept_after(**params) -> list[int]:
    return kept(process_logits(LOGITS, SamplingParams(**params), [], []))


def test_temperature_comes_before_top_p():
    # at T=2 the probabilities flatten to ~[.35, .25, .19, .12, .10]: token 2 has 0.59 before it
    assert _kept_after(temperature=2.0, top_p=0.6) == [0, 1, 2]
    assert kept(top_p_filter(LOGITS, 0.6)) == [0, 1]  # filtering first would keep two


def test_temperature_comes_before_min_p():
    # p/p_max at T=2 is sqrt([1, .5, .3, .12, .08]) = [1, .71, .55, .35, .28]
    assert _kept_after(temperature=2.0, min_p=0.33) == [0, 1, 2, 3]
    assert _kept_after(temperature=1.0, min_p=0.33) == [0, 1]


def test_top_p_sees_the_renormalised_top_k_distribution():
    # after top-k 2 the row is [2/3, 1/3]: the mass before token 1 is 2/3 >= 0.6
    assert _kept_after(top_k=2, top_p=0.6) == [0]


def test_min_p_comes_after_top_p():
    # top-p 0.8 keeps [0, 1, 2]; min-p 0.2 keeps them. Min-p first would renormalise to
    # [.56, .28, .17] where token 2 has 0.83 >= 0.8 before it and would be dropped.
    assert _kept_after(top_p=0.8, min_p=0.2) == [0, 1, 2]


def test_process_logits_for_greedy_is_the_penalised_logits():
    params = SamplingParams(temperature=0.0, top_k=1, repetition_penalty=2.0)
    out = process_logits(LOGITS, params, [1], [])
    expected = LOGITS.clone()
    expected[1] *= 2.0  # negative logit: multiplied
    assert torch.equal(out, expected)


# -- penalties ---------------------------------------------------------------------


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    row = torch.tensor([2.0, -2.0, 1.0, 0.5, 0.0])
    before = row.clone()
    out = apply_penalties(row, SamplingParams(repetition_penalty=2.0), [0, 4], [1])
    assert torch.equal(out, torch.tensor([1.0, -4.0, 1.0, 0.5, 0.0]))
    assert torch.equal(row, before)  # input untouched


def test_repetition_penalty_counts_each_seen_token_once():
    row = torch.tensor([4.0, 1.0])
    out = apply_penalties(row, SamplingParams(repetition_penalty=2.0), [0, 0, 0], [0, 0])
    assert out.tolist() == [2.0, 1.0]


def test_repetition_penalty_uses_the_prompt():
    # pitfall 11: without the prompt, token 0 (3.0) would win; penalised it is 1.5 < 2.0
    row = torch.tensor([3.0, 2.0])
    params = SamplingParams(repetition_penalty=2.0)
    assert apply_penalties(row, params, [0], []).tolist() == [1.5, 2.0]
    assert int(process_logits(row, params.replace(temperature=0.0), [0], []).argmax()) == 1


def test_presence_and_frequency_penalise_generated_tokens_only():
    row = torch.tensor([1.0, 1.0, 1.0, 1.0])
    params = SamplingParams(presence_penalty=0.5, frequency_penalty=0.25)
    out = apply_penalties(row, params, prompt_ids=[0, 0, 1], generated_ids=[2, 2, 3, 1])
    # token 0 is prompt-only: untouched; 1 and 3 seen once; 2 seen twice
    assert out.tolist() == [1.0, 0.25, 0.0, 0.25]


def test_prompt_is_not_counted_as_generated():
    # pitfall 11: a presence penalty applied to the prompt would flip this greedy choice
    row = torch.tensor([3.0, 2.9])
    params = SamplingParams(temperature=0.0, presence_penalty=0.5)
    assert int(process_logits(row, params, [0], []).argmax()) == 0
    assert int(process_logits(row, params, [], [0]).argmax()) == 1


def test_negative_penalties_encourage():
    out = apply_penalties(torch.zeros(3), SamplingParams(presence_penalty=-1.0, frequency_penalty=-0.5), [], [1, 1])
    assert out.tolist() == [0.0, 2.0, 0.0]


def test_penalties_accept_tensors_and_reject_out_of_range_ids():
    row = torch.tensor([2.0, 2.0, 2.0])
    params = SamplingParams(repetition_penalty=2.0, frequency_penalty=1.0)
    from_lists = apply_penalties(row, params, [0], [2, 2])
    assert torch.equal(apply_penalties(row, params, torch.tensor([0]), torch.tensor([2, 2])), from_lists)
    assert from_lists.tolist() == [1.0, 2.0, -1.0]
    with pytest.raises(ValueError, match="token ids"):
        apply_penalties(row, params, [3], [])
    with pytest.raises(ValueError, match="token ids"):
        apply_penalties(row, params, [], [-1])


def test_neutral_penalties_return_an_equal_copy():
    row = torch.tensor([1.0, -1.0])
    out = apply_penalties(row, SamplingParams(), [0, 1], [0, 1])
    assert torch.equal(out, row) and out.data_ptr() != row.data_ptr()


# -- properties --------------------------------------------------------------------


def _reference_top_p(row: torch.Tensor, top_p: float) -> list[int]:
    """The rule, slowly: a token is dropped iff the mass strictly before it is >= p.

    Order by logit (lowest index first on ties): logits too close to differ in probability
    still have an order, and the argmax comes first.
    """
    probs = torch.softmax(row.double(), -1).tolist()
    values = row.tolist()
    order = sorted(range(len(probs)), key=lambda i: (-values[i], i))
    keep, before = [], 0.0
    for i in order:
        if before < top_p or not keep:
            keep.append(i)
        before += probs[i]
    return keep


def _margins(row: torch.Tensor, top_p: float) -> float:
    """How far every mass-before is from p: the reference is float64, the filter float32."""
    probs = torch.softmax(row.double(), -1).sort(descending=True).values
    return float((probs.cumsum(0) - probs - top_p).abs().min())


rows_1d = st.integers(2, 40).flatmap(lambda v: st.lists(st.floats(-20, 20, width=32), min_size=v, max_size=v))
rows_2d = st.tuples(st.integers(1, 4), st.integers(2, 30)).flatmap(
    lambda bv: st.lists(
        st.lists(st.floats(-20, 20, width=32), min_size=bv[1], max_size=bv[1]), min_size=bv[0], max_size=bv[0]
    )
)
any_rows = st.one_of(rows_1d, rows_2d).map(lambda x: torch.tensor(x, dtype=torch.float32))
top_ps = st.floats(1e-6, 1.0, exclude_min=False)
min_ps = st.floats(0.0, 1.0)


def _filters(k: int, p: float, m: float):
    return [
        lambda x: top_k_filter(x, k),
        lambda x: top_p_filter(x, p),
        lambda x: min_p_filter(x, m),
        lambda x: apply_temperature(x, 0.7),
        lambda x: min_p_filter(top_p_filter(top_k_filter(x, k), p), m),
    ]


@settings(max_examples=150, deadline=None)
@given(any_rows, st.integers(0, 50), top_ps, min_ps)
def test_filters_keep_argmax_shape_and_a_distribution(rows, k, p, m):
    original = rows.clone()
    for filt in _filters(k, p, m):
        out = filt(rows)
        assert out.shape == rows.shape and out.dtype == rows.dtype
        out2 = out.reshape(-1, rows.shape[-1])
        argmax = rows.reshape(-1, rows.shape[-1]).argmax(-1, keepdim=True)
        assert torch.isfinite(out2.gather(-1, argmax)).all()  # argmax never dropped
        sums = torch.softmax(out2, -1).sum(-1)
        assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5)
    assert torch.equal(rows, original)  # nothing modified in place


@settings(max_examples=150, deadline=None)
@given(any_rows, st.integers(1, 50))
def test_top_k_keeps_at_least_the_k_largest(rows, k):
    out = top_k_filter(rows, k).reshape(-1, rows.shape[-1])
    flat = rows.reshape(-1, rows.shape[-1])
    largest = torch.topk(flat, min(k, flat.shape[-1]), dim=-1).indices
    assert torch.isfinite(out.gather(-1, largest)).all()
    for b in range(flat.shape[0]):
        keep = torch.isfinite(out[b])
        if not keep.all():  # every kept logit >= every dropped one, and at most ties over k
            assert flat[b][keep].min() > flat[b][~keep].max()
            assert int(keep.sum()) >= min(k, flat.shape[-1])


@settings(max_examples=150, deadline=None)
@given(rows_1d.map(torch.tensor), top_ps)
def test_top_p_matches_the_rule(row, p):
    assume(_margins(row, p) > 1e-5)  # away from ties with p the float32 sums could flip
    assert set(kept(top_p_filter(row, p))) == set(_reference_top_p(row, p))


@settings(max_examples=150, deadline=None)
@given(rows_1d.map(torch.tensor), min_ps)
def test_min_p_matches_the_rule(row, m):
    probs = torch.softmax(row.double(), -1)
    ratio = probs / probs.max()
    assume(bool(((ratio - m).abs() > 1e-5).all()))
    expected = (ratio >= m).nonzero().flatten().tolist()
    assert kept(min_p_filter(row, m)) == expected


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from([300, 5000]), top_ps)
def test_top_p_wide_rows_match_the_rule(seed, vocab, p):
    gen = torch.Generator().manual_seed(seed)
    row = torch.randn(vocab, generator=gen) * float(torch.rand(1, generator=gen)) * 3
    assume(_margins(row, p) > 1e-5)
    assert set(kept(top_p_filter(row, p))) == set(_reference_top_p(row, p))


@given(
    prompt=st.lists(st.integers(0, 15), max_size=12),
    generated=st.lists(st.integers(0, 15), max_size=12),
    n=st.integers(1, 30),
    seed=st.integers(0, 2**16),
)
def test_penalty_last_n_penalizes_as_the_last_n_tokens_alone(prompt, generated, n, seed):
    """The window is the sequence's last n tokens, prompt included: the same as penalties over that tail, with
    the tail's generated part (presence and frequency count only the answer's tokens)."""
    logits = torch.randn(16, generator=torch.Generator().manual_seed(seed))
    base = SamplingParams(repetition_penalty=1.7, presence_penalty=0.5, frequency_penalty=0.25)
    tail = (prompt + generated)[-n:]
    tail_generated = tail[max(0, len(tail) - len(generated)) :]
    tail_prompt = tail[: len(tail) - len(tail_generated)]
    windowed = apply_penalties(logits, base.replace(penalty_last_n=n), prompt, generated)
    assert torch.equal(windowed, apply_penalties(logits, base, tail_prompt, tail_generated))
    if n >= len(prompt) + len(generated):
        assert torch.equal(windowed, apply_penalties(logits, base, prompt, generated))


def test_penalty_last_n_counts_the_prompt_as_llama_cpp_does():
    logits = torch.ones(8)
    params = SamplingParams(repetition_penalty=2.0, penalty_last_n=2)
    out = apply_penalties(logits, params, [1, 2, 3], [4])  # the window: 3 (prompt) and 4 (answer)
    assert out.tolist() == [1, 1, 1, 0.5, 0.5, 1, 1, 1]
    with pytest.raises(TinyLLMError, match="penalty_last_n must be None or an integer >= 1, got 0"):
        SamplingParams(penalty_last_n=0)
