"""sample / sample_batch / request_rng: greedy, seeded replay, distribution, batching."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm.sampling import (
    RequestRng,
    SampleResult,
    SamplingParams,
    process_logits,
    request_rng,
    sample,
    sample_batch,
    sampled_entropy,
)
from tinyllm.sampling.sampler import _inverse_cdf

PROBS = [0.5, 0.25, 0.15, 0.06, 0.04]
LOGITS = torch.tensor(PROBS).log()
Z_999 = 3.090232306167813  # standard normal quantile for an upper tail of 0.001


def draw(logits, params, position=0, seed=0, prompt=(), generated=()):
    return sample(
        logits, params, prompt_ids=list(prompt), generated_ids=list(generated), rng=request_rng(seed), position=position
    )


def flat_logits(vocab=50, seed=0):
    return torch.randn(vocab, generator=torch.Generator().manual_seed(seed))


# -- request_rng -------------------------------------------------------------------


def test_uniform_is_a_pure_function_of_seed_position_stream():
    rng = request_rng(123)
    first = rng.uniform(5)
    for pos in range(50):
        rng.uniform(pos, stream=pos % 3)
    assert rng.uniform(5) == first
    assert request_rng(123).uniform(5) == first
    assert RequestRng(123) == rng


def test_uniforms_are_in_range_and_differ_across_seeds_positions_streams():
    values = [request_rng(s).uniform(p, t) for s in range(4) for p in range(50) for t in range(3)]
    assert all(0.0 <= v < 1.0 for v in values)
    assert len(set(values)) == len(values)


def test_none_seed_means_zero():
    assert request_rng(None) == request_rng(0)
    assert request_rng(None).uniform(3) == request_rng(0).uniform(3)


@pytest.mark.parametrize("bad", [-1, 2**63, 1.5, True, "3"])
def test_bad_seeds_are_rejected(bad):
    with pytest.raises(ValueError, match="seed"):
        request_rng(bad)


def test_bad_positions_and_streams_are_rejected():
    with pytest.raises(ValueError, match="position"):
        request_rng(0).uniform(-1)
    with pytest.raises(ValueError, match="stream"):
        request_rng(0).uniform(0, stream=True)


def _chi2_critical(df: int) -> float:
    """Wilson–Hilferty: chi2 quantile ~ df (1 - 2/(9df) + z sqrt(2/(9df)))^3."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + Z_999 * math.sqrt(c)) ** 3


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_wilson_hilferty_is_close_to_known_quantiles():
    # chi2 upper 0.001 quantiles from tables
    for df, exact in ((2, 13.816), (4, 18.467), (10, 29.588), (19, 43.820)):
        assert abs(_chi2_critical(df) - exact) / exact < 0.03


@pytest.mark.parametrize("stream", [0, 1])
def test_uniforms_are_uniform(stream):
    rng = request_rng(2024)
    values = torch.tensor([rng.uniform(p, stream) for p in range(20000)], dtype=torch.float64)
    counts = torch.histc(values, bins=20, min=0.0, max=1.0)
    assert _chi2(counts, torch.full((20,), 1 / 20, dtype=torch.float64)) < _chi2_critical(19)
    # consecutive positions are not correlated
    assert abs(float(torch.corrcoef(torch.stack([values[:-1], values[1:]]))[0, 1])) < 0.03


# -- greedy ------------------------------------------------------------------------


def test_greedy_takes_the_argmax_lowest_index_on_ties():
    greedy = SamplingParams(temperature=0.0)
    assert draw(LOGITS, greedy).token == 0
    assert draw(torch.tensor([1.0, 5.0, 5.0, 2.0, 5.0]), greedy).token == 1
    assert draw(torch.tensor([1.0, 2.0]), greedy).token == 1


def test_greedy_ignores_the_seed_and_position():
    row = flat_logits(seed=3)
    tokens = {
        draw(row, SamplingParams(temperature=0.0, seed=s), position=p, seed=s).token for s in range(5) for p in range(5)
    }
    assert tokens == {int(row.argmax())}


def test_greedy_reports_the_penalised_distribution():
    row = torch.tensor([3.0, 2.0, 0.0])
    params = SamplingParams(temperature=0.0, repetition_penalty=2.0, top_k=1, logprobs=3)
    result = draw(row, params, prompt=[0])
    penalised = torch.tensor([1.5, 2.0, 0.0])  # top-k is skipped by greedy
    logp = torch.log_softmax(penalised, -1)
    assert result.token == 1
    assert result.logprob == pytest.approx(float(logp[1]), abs=1e-6)
    assert result.entropy == pytest.approx(float(-(logp.exp() * logp).sum()), abs=1e-6)
    assert [t for t, _ in result.top_logprobs] == [1, 0, 2]


# -- seeded sampling ---------------------------------------------------------------


def test_same_seed_and_position_give_the_same_token_in_any_call_order():
    row = flat_logits()
    params = SamplingParams(temperature=1.0, seed=11)
    forward = [draw(row, params, position=p, seed=11).token for p in range(100)]
    backward = {}
    for p in reversed(range(100)):
        draw(row, params, position=p, seed=12)  # another request's draws in between
        backward[p] = draw(row, params, position=p, seed=11).token
    assert forward == [backward[p] for p in range(100)]
    assert len(set(forward)) > 10  # the test distribution really is random


def test_different_seeds_differ_somewhere():
    row = flat_logits()
    params = SamplingParams()
    a = [draw(row, params, position=p, seed=1).token for p in range(30)]
    b = [draw(row, params, position=p, seed=2).token for p in range(30)]
    assert a != b


def _replay(logits, params, prompt, generated, seed, position):
    """Seed 000's oracle: process_logits -> softmax -> float64 cumsum -> first > u * total."""
    processed = process_logits(logits, params, prompt, generated)
    probs = torch.softmax(processed.float(), -1)
    cdf = probs.double().cumsum(0)
    u = request_rng(seed).uniform(position)
    token = int((cdf > u * cdf[-1]).nonzero()[0])
    logp = torch.log_softmax(processed.float(), -1)
    entropy = -sum(float(p) * float(lp) for p, lp in zip(probs, logp) if p > 0)
    return token, float(logp[token]), entropy


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(),
        SamplingParams(temperature=0.7, top_k=10, top_p=0.9, min_p=0.02),
        SamplingParams(temperature=1.3, repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=0.3),
    ],
)
def test_seeded_sample_replays_by_hand(params):
    row = flat_logits(seed=5) * 2
    prompt, generated = [1, 2, 3, 3, 7], [7, 9, 9, 4]
    for position in range(40):
        result = draw(row, params, position, seed=77, prompt=prompt, generated=generated)
        token, logprob, entropy = _replay(row, params, prompt, generated, 77, position)
        assert result.token == token
        assert result.logprob == pytest.approx(logprob, abs=1e-6)
        assert result.entropy == pytest.approx(entropy, abs=1e-5)


def test_sampling_uses_the_prompt_in_the_repetition_penalty():
    # pitfall 11: with the prompt ignored the seeded draw would differ from the replay
    row = torch.tensor([2.0, 0.0, 0.0, 0.0])
    params = SamplingParams(repetition_penalty=10.0)
    tokens = [draw(row, params, p, seed=3, prompt=[0]).token for p in range(200)]
    unpenalised = [draw(row, SamplingParams(), p, seed=3).token for p in range(200)]
    assert tokens.count(0) < 100 < unpenalised.count(0)


class FixedRng:
    """Stands in for RequestRng to put u exactly on the edges of the inverse CDF."""

    def __init__(self, u: float):
        self.u = u

    def uniform(self, position: int, stream: int = 0) -> float:
        return self.u


@pytest.mark.parametrize(
    ("u", "token"),
    [
        (0.0, 1),  # u = 0 must not pick the probability-0 token 0
        (0.25, 1),
        (0.5, 3),  # cdf == u * total exactly: the first index strictly above is token 3
        (0.75, 3),
        (1.0 - 2.0**-53, 3),  # the largest uniform never runs onto the dropped tail
    ],
)
def test_inverse_cdf_edges(u, token):
    row = torch.tensor([float("-inf"), 0.0, float("-inf"), 0.0, float("-inf")])
    result = sample(row, SamplingParams(), prompt_ids=[], generated_ids=[], rng=FixedRng(u), position=0)
    assert result.token == token


def test_never_draws_a_dropped_token():
    row = flat_logits(vocab=30, seed=1)
    params = SamplingParams(top_k=4, top_p=0.8)
    allowed = set(torch.isfinite(process_logits(row, params, [], [])).nonzero().flatten().tolist())
    assert {draw(row, params, p).token for p in range(500)} <= allowed


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(),
        SamplingParams(top_k=3),
        SamplingParams(temperature=0.7, top_p=0.8),
        SamplingParams(temperature=1.5, top_k=6, min_p=0.1, repetition_penalty=1.5),
    ],
)
@pytest.mark.slow
def test_draws_follow_the_filtered_distribution(params):
    row = torch.tensor([2.0, 1.5, 1.2, 1.0, 0.4, 0.2, -0.5, -1.0])
    probs = torch.softmax(process_logits(row, params, [1], []), -1).double()
    n = 20000
    tokens = [draw(row, params, p, seed=99, prompt=[1]).token for p in range(n)]
    counts = torch.bincount(torch.tensor(tokens), minlength=8).double()
    live = probs > 0
    assert counts[~live].sum() == 0  # dropped tokens never appear
    df = int(live.sum()) - 1
    assert df >= 1 and (probs[live] * n).min() > 5  # the chi-square approximation is valid
    assert _chi2(counts[live], probs[live]) < _chi2_critical(df)
    # and the check has power: an off-by-one draw (probabilities shifted) is rejected
    assert _chi2(counts[live], probs[live].roll(1)) > _chi2_critical(df)


# -- what a result reports ---------------------------------------------------------


def test_logprob_and_entropy_describe_the_filtered_distribution():
    result = draw(LOGITS, SamplingParams(top_k=2, logprobs=5), position=4)
    assert result.token in (0, 1)
    expected = {0: math.log(2 / 3), 1: math.log(1 / 3)}
    assert result.logprob == pytest.approx(expected[result.token], abs=1e-6)
    assert result.entropy == pytest.approx(-(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3)), abs=1e-6)
    # only the two live tokens are alternatives
    assert [t for t, _ in result.top_logprobs] == [0, 1]
    assert result.top_logprobs[0][1] == pytest.approx(math.log(2 / 3), abs=1e-6)


@pytest.mark.parametrize(("n", "length"), [(None, 0), (0, 0), (1, 1), (3, 3), (20, 20)])
def test_top_logprobs_count_and_order(n, length):
    row = flat_logits(vocab=40, seed=2)
    result = draw(row, SamplingParams(logprobs=n))
    assert len(result.top_logprobs) == length
    values = [lp for _, lp in result.top_logprobs]
    assert values == sorted(values, reverse=True)
    if length:
        logp = torch.log_softmax(row, -1)
        assert result.top_logprobs[0][0] == int(row.argmax())
        assert result.top_logprobs[0][1] == pytest.approx(float(logp.max()), abs=1e-6)


def test_sampled_entropy():
    assert sampled_entropy(torch.zeros(4)) == pytest.approx(math.log(4))
    masked = torch.tensor([0.0, float("-inf"), 0.0, float("-inf")])
    assert sampled_entropy(masked) == pytest.approx(math.log(2))
    assert sampled_entropy(torch.tensor([5.0, float("-inf")])) == 0.0
    p = torch.tensor(PROBS, dtype=torch.float64)
    assert sampled_entropy(LOGITS) == pytest.approx(float(-(p * p.log()).sum()), abs=1e-6)


def test_sample_does_not_modify_its_inputs():
    row = flat_logits()
    before = row.clone()
    prompt, generated = [1, 2], [3, 3]
    draw(
        row, SamplingParams(repetition_penalty=2.0, frequency_penalty=1.0, top_k=5), prompt=prompt, generated=generated
    )
    assert torch.equal(row, before) and prompt == [1, 2] and generated == [3, 3]


@pytest.mark.parametrize("bad", [torch.tensor([0.0, float("nan")]), torch.full((3,), float("-inf")), torch.zeros(2, 3)])
def test_unusable_logits_are_rejected(bad):
    with pytest.raises(ValueError, match="logits"):
        draw(bad, SamplingParams())


def test_half_precision_logits_are_accepted():
    row = flat_logits().to(torch.bfloat16)
    params = SamplingParams(top_p=0.9)
    assert draw(row, params, 3).token == draw(row.float(), params, 3).token


# -- batches -----------------------------------------------------------------------


def _same(a: SampleResult, b: SampleResult) -> None:
    assert a.token == b.token
    assert a.logprob == pytest.approx(b.logprob, abs=1e-6)
    assert a.entropy == pytest.approx(b.entropy, abs=1e-6)
    assert [t for t, _ in a.top_logprobs] == [t for t, _ in b.top_logprobs]


PARAM_CHOICES = [
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=0.0, repetition_penalty=1.5),
    SamplingParams(temperature=0.0, logprobs=2),
    SamplingParams(),
    SamplingParams(temperature=0.6, top_k=4, top_p=0.9, logprobs=3),
    SamplingParams(min_p=0.2, presence_penalty=1.0, frequency_penalty=-0.5),
    SamplingParams(temperature=0.0, max_tokens=None, min_tokens=500, stop_token_ids=(1, 3)),  # greedy past 500
    SamplingParams(temperature=0.8, max_tokens=None, min_tokens=500, stop_token_ids=(0, 40)),
]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda b: st.tuples(
            st.lists(st.sampled_from(PARAM_CHOICES), min_size=b, max_size=b),
            st.lists(st.lists(st.integers(0, 11), max_size=4), min_size=b, max_size=b),
            st.lists(st.lists(st.integers(0, 11), max_size=4), min_size=b, max_size=b),
            st.lists(st.integers(0, 1000), min_size=b, max_size=b),
            st.lists(st.integers(0, 1000), min_size=b, max_size=b),
            st.integers(0, 2**31),
        )
    )
)
def test_sample_batch_equals_per_row_sample(case):
    params, prompts, generated, seeds, positions, data_seed = case
    batch = len(params)
    logits = torch.randn(batch, 12, generator=torch.Generator().manual_seed(data_seed)) * 2
    logits[:, 5] = logits[:, 3]  # some exact ties for the greedy rows
    rngs = [request_rng(s) for s in seeds]
    results = sample_batch(logits, params, prompts, generated, rngs, positions)
    assert len(results) == batch
    for i in range(batch):
        _same(
            results[i],
            sample(
                logits[i],
                params[i],
                prompt_ids=prompts[i],
                generated_ids=generated[i],
                rng=rngs[i],
                position=positions[i],
            ),
        )


def test_all_greedy_batch_is_one_argmax_with_lowest_index_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0], [0.0, 0.0, 0.0], [5.0, 1.0, 5.0]])
    greedy = [SamplingParams(temperature=0.0)] * 3
    results = sample_batch(logits, greedy, [[]] * 3, [[]] * 3, [request_rng(0)] * 3, [0] * 3)
    assert [r.token for r in results] == [1, 0, 0]
    assert results[1].entropy == pytest.approx(math.log(3))
    assert results[1].logprob == pytest.approx(-math.log(3))


def test_sample_batch_checks_lengths():
    with pytest.raises(ValueError, match="positions"):
        sample_batch(torch.zeros(2, 3), [SamplingParams()] * 2, [[]] * 2, [[]] * 2, [request_rng(0)] * 2, [0])


# -- tiny temperatures and broken distributions ----------------------------------------


def test_a_temperature_below_the_greedy_line_is_greedy():
    logits = flat_logits(seed=4) * 20
    tiny, greedy = (
        draw(logits, SamplingParams(temperature=1e-50, logprobs=2)),
        draw(logits, SamplingParams(temperature=0, logprobs=2)),
    )
    assert tiny == greedy and tiny.token == int(torch.argmax(logits)) and math.isfinite(tiny.logprob)


def test_a_row_whose_distribution_is_nan_is_an_error_not_a_token():
    from tinyllm.sampling.sampler import InvalidDistribution

    row = torch.tensor([0.0, float("inf"), 1.0])  # inf - inf = NaN once shifted by the row max
    with pytest.raises(InvalidDistribution):
        draw(row, SamplingParams(temperature=1.0))


# -- min_tokens ------------------------------------------------------------------------


def test_stop_ids_are_held_back_before_min_tokens_and_drawn_after():
    logits = torch.tensor([0.0, 9.0, 1.0, 8.0, 2.0])  # greedy would take 1, then 3
    p = SamplingParams(temperature=0, max_tokens=None, min_tokens=2, stop_token_ids=(1, 3, 99), logprobs=5)
    held = draw(logits, p, position=1, generated=[4])
    assert held.token == 4 and {t for t, _ in held.top_logprobs} == {0, 2, 4}
    assert held.logprob == pytest.approx(float(torch.log_softmax(logits[[0, 2, 4]], -1)[2]))
    assert draw(logits, p, position=2, generated=[4, 4]).token == 1
    sampled = [draw(logits, p.replace(temperature=5.0), position=1, seed=s).token for s in range(200)]
    assert not {1, 3} & set(sampled) and len(set(sampled)) == 3


class OnlyStopsLeft:
    """A grammar whose text is complete: nothing but the stop ids 1 and 3 may follow."""

    def mask_logits(self, logits, history):
        keep = torch.full_like(logits, float("-inf"))  # [V]
        keep[[1, 3]] = 0.0
        return logits + keep


def test_min_tokens_yields_when_the_grammar_allows_only_a_stop():
    p = SamplingParams(temperature=0, max_tokens=None, min_tokens=10, stop_token_ids=(1, 3))
    got = sample(
        torch.tensor([0.0, 2.0, 1.0, 3.0]),
        p,
        prompt_ids=[],
        generated_ids=[],
        rng=request_rng(0),
        position=0,
        constraint=OnlyStopsLeft(),
    )
    assert got.token == 3


def test_a_draw_at_the_very_top_of_the_cdf_takes_the_last_live_token():
    logits = torch.tensor([0.0, 1.0, 2.0, float("-inf")])  # the last token dropped by a filter
    assert _inverse_cdf(logits, 1.0) == 2  # u * total equal to the total (as rounding can make it)
    assert _inverse_cdf(logits, 0.0) == 0
