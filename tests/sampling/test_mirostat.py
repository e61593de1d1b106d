"""sampling/mirostat.py against a plain per-token twin in float64, step after step with the mu each step leaves:
the token drawn with the request's uniform and mu after it, for v1 and v2; a Zipf row gives back its exponent;
rows alone equal rows batched; the settings are checked."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm.errors import TinyLLMError
from tinyllm.sampling.mirostat import MuTrail, mirostat_filter, surprise_bits, v1_k
from tinyllm.sampling.params import SamplingParams
from tinyllm.sampling.rng import request_rng
from tinyllm.sampling.sampler import sample, sample_batch

LN2 = math.log(2)


def plain_k(sorted_log_probs: list[float], mu: float, vocab: int) -> tuple[int, float]:
    """llama.cpp's k, token by token, from the live tokens' log-probabilities in descending order; and how far
    the real k was from an integer (where float rounding could floor it otherwise)."""
    n = min(100, len(sorted_log_probs))
    if n < 2:
        return 1, math.inf
    t = [math.log((i + 2) / (i + 1)) for i in range(n - 1)]
    b = [sorted_log_probs[i] - sorted_log_probs[i + 1] for i in range(n - 1)]
    s_hat = sum(ti * bi for ti, bi in zip(t, b)) / sum(ti * ti for ti in t)
    eps = s_hat - 1
    ratio = 1 / math.log(vocab) if eps == 0 else eps / (1 - vocab**-eps)
    top = mu * LN2 + math.log(ratio)
    if s_hat == 0:
        return (vocab if top > 0 else 1), math.inf
    log_k = top / s_hat
    if log_k > math.log(vocab) + 1:
        return vocab, math.inf
    k = math.exp(log_k)
    return min(max(math.floor(k), 1), vocab), abs(k - round(k))


def plain_step(logits: list[float], mu: float, version: int, u: float, tau: float, eta: float):
    """(token, mu after it, the least margin of any decision) for one row, in float64."""
    vocab = len(logits)
    live = [i for i, x in enumerate(logits) if x > -math.inf]
    top = max(logits)
    log_total = math.log(sum(math.exp(logits[i] - top) for i in live))
    log_p = {i: logits[i] - top - log_total for i in live}
    order = sorted(live, key=lambda i: (-logits[i], i))
    margin = math.inf
    if version == 2:
        keep = [i for i in live if -log_p[i] / LN2 <= mu] or [order[0]]
        margin = min(abs(-log_p[i] / LN2 - mu) for i in live)
    else:
        k, margin = plain_k([log_p[i] for i in order], mu, vocab)
        kth = logits[order[min(k, len(live)) - 1]]
        keep = [i for i in live if logits[i] >= kth]
    kept_total = sum(math.exp(log_p[i]) for i in keep)
    q = [math.exp(log_p[i]) / kept_total if i in keep else 0.0 for i in range(vocab)]
    cumulative, token = 0.0, max(keep)
    for i in range(vocab):
        cumulative += q[i]
        margin = min(margin, abs(cumulative - u)) if q[i] > 0 else margin
        if cumulative > u:
            token = i
            break
    surprise = -math.log(q[token]) / LN2
    return token, mu - eta * (surprise - tau), margin


ROW_OF = {
    n: st.lists(st.floats(-8, 8, allow_nan=False, width=32) | st.just(-math.inf), min_size=n, max_size=n).filter(
        lambda xs: max(xs) > -math.inf
    )
    for n in range(2, 41)
}


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    version=st.sampled_from([1, 2]),
    tau=st.floats(0.1, 8),
    eta=st.floats(0.01, 1.5),
    seed=st.integers(0, 2**32),
    num_steps=st.integers(1, 6),
    vocab=st.integers(2, 40),
)
def test_sample_follows_the_plain_twin_token_and_mu_step_after_step(data, version, tau, eta, seed, num_steps, vocab):
    params = SamplingParams(mirostat=version, mirostat_tau=tau, mirostat_eta=eta, seed=seed)
    rng = request_rng(seed)
    mu = twin_mu = 2 * tau
    for position in range(num_steps):
        row = data.draw(ROW_OF[vocab])
        logits = torch.tensor(row)
        logits = logits - logits.max()  # max 0: temperature 1 then changes no value
        got = sample(logits, params, prompt_ids=[], generated_ids=[], rng=rng, position=position, mu=mu)
        token, twin_mu, margin = plain_step(logits.tolist(), twin_mu, version, rng.uniform(position), tau, eta)
        if margin < 1e-6:  # a near tie: float32 probabilities or rounding may decide otherwise
            return
        assert got.token == token
        assert got.mu_after == pytest.approx(twin_mu, rel=1e-12, abs=1e-12)
        mu = got.mu_after


@settings(max_examples=40, deadline=None)
@given(
    version=st.sampled_from([1, 2]),
    tau=st.floats(0.5, 8),
    scale=st.floats(0.5, 6),
    seed=st.integers(0, 2**32),
    vocab=st.integers(101, 400),
)
def test_rows_longer_than_the_hundred_tokens_v1_fits_on_follow_the_twin(version, tau, scale, seed, vocab):
    params = SamplingParams(mirostat=version, mirostat_tau=tau, mirostat_eta=0.5, seed=seed)
    rng, mu = request_rng(seed), 2 * tau
    generator = torch.Generator().manual_seed(seed)
    for position in range(3):
        logits = torch.randn(vocab, generator=generator) * scale
        logits = logits - logits.max()
        got = sample(logits, params, prompt_ids=[], generated_ids=[], rng=rng, position=position, mu=mu)
        token, twin_mu, margin = plain_step(logits.tolist(), mu, version, rng.uniform(position), tau, 0.5)
        if margin < 1e-6:
            return
        assert (got.token, got.mu_after) == (token, pytest.approx(twin_mu, rel=1e-12, abs=1e-12))
        mu = got.mu_after


@pytest.mark.parametrize("s", [1.3, 2.0])
def test_v1_recovers_the_exponent_of_a_zipf_row(s):
    """p_i proportional to 1 / i^s: every log-ratio is s * t_i, so s_hat = s and k follows the paper's formula."""
    vocab, mu = 1000, 7.0
    log_probs = torch.log_softmax(-s * torch.log(torch.arange(1, vocab + 1, dtype=torch.float64)), dim=-1)
    eps = s - 1
    expected = ((eps * 2**mu) / (1 - vocab**-eps)) ** (1 / s)
    assert int(v1_k(log_probs.reshape(1, -1), torch.tensor([mu]))) == math.floor(expected)
    assert 1 < math.floor(expected) < vocab


@pytest.mark.parametrize("version", [1, 2])
def test_one_token_a_flat_row_and_a_grammar_that_leaves_one_token(version):
    def kept(row, mu):
        return (mirostat_filter(torch.tensor([row]), torch.tensor([mu]), version) > -math.inf).tolist()[0]

    assert kept([0.5], 3.0) == [True]
    assert kept([0.5, -math.inf, 0.2], -3.0) == [True, False, False]
    assert kept([-math.inf, 0.1, -math.inf], 8.0) == [False, True, False]
    # a flat row: v1's s_hat is 0 and k is V or 1 as 2^mu is above or below V - 1 (4 here), but a tie at the k-th
    # logit stays, so v1 keeps the row whole; v2 keeps every token's 2.32 bits from mu = 3 and the first below
    flat = torch.zeros(1, 5, dtype=torch.float64)
    assert [int(v1_k(torch.log_softmax(flat, -1), torch.tensor([mu]))) for mu in (3.0, 1.0)] == [5, 1]
    assert kept([0.0] * 5, 3.0) == [True] * 5
    assert kept([0.0] * 5, 1.0) == ([True] * 5 if version == 1 else [True] + [False] * 4)


def test_v2_keeps_the_surprises_up_to_mu_and_the_top_when_none_is():
    logits = torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log()  # surprises 1.32, 1.74, 2.32, 3.32 bits
    kept = mirostat_filter(logits, torch.tensor([2.0]), 2) > -math.inf
    assert kept.tolist() == [[True, True, False, False]]
    kept = mirostat_filter(logits, torch.tensor([0.5]), 2) > -math.inf
    assert kept.tolist() == [[True, False, False, False]]


def test_rows_alone_equal_rows_batched():
    rows = torch.randn(4, 300, generator=torch.Generator().manual_seed(5)) * 3
    mus = torch.tensor([3.0, 6.0, 9.0, 12.0])
    for version in (1, 2):
        batched = mirostat_filter(rows, mus, version)
        assert len({int((b > -math.inf).sum()) for b in batched}) > 1  # each row's own mu cut it
        for i in range(4):
            assert torch.equal(mirostat_filter(rows[i : i + 1], mus[i : i + 1], version)[0], batched[i])
    params = [SamplingParams(mirostat=v, seed=i) for i, v in enumerate((1, 2, 1, 2))]
    rngs = [request_rng(i) for i in range(4)]
    together = sample_batch(rows, params, [[]] * 4, [[]] * 4, rngs, [3] * 4, mus=[m.item() for m in mus])
    for i in range(4):
        solo = sample(rows[i], params[i], prompt_ids=[], generated_ids=[], rng=rngs[i], position=3, mu=float(mus[i]))
        assert (together[i].token, together[i].mu_after) == (solo.token, solo.mu_after)


def test_surprise_bits_reads_each_rows_own_token():
    logits = torch.tensor([[0.5, 0.25, 0.25], [0.125, 0.375, 0.5]], dtype=torch.float64).log()  # [2, 3]
    assert surprise_bits(logits, torch.tensor([1, 0])).tolist() == pytest.approx([2.0, 3.0], abs=1e-12)


def test_seeded_draws_repeat_and_mu_changes_the_draw():
    logits = torch.randn(500, generator=torch.Generator().manual_seed(1)) * 2
    params = SamplingParams(mirostat=2, mirostat_tau=3.0, seed=4)
    draws = [sample(logits, params, prompt_ids=[], generated_ids=[], rng=request_rng(4), position=p) for p in range(6)]
    again = [sample(logits, params, prompt_ids=[], generated_ids=[], rng=request_rng(4), position=p) for p in range(6)]
    assert [(d.token, d.mu_after) for d in draws] == [(d.token, d.mu_after) for d in again]
    for d in draws:  # every draw starts from mu = 2 * tau, its surprise the logprob reported, in bits
        assert d.mu_after == pytest.approx(6.0 - 0.1 * (-d.logprob / LN2 - 3.0), abs=1e-6)
    low = [sample(logits, params, prompt_ids=[], generated_ids=[], rng=request_rng(4), position=p, mu=0.1).token
           for p in range(6)]  # fmt: skip
    assert set(low) == {int(logits.argmax())}  # a mu below every surprise keeps the most likely token alone
    assert len({d.token for d in draws}) > 1


def test_greedy_ignores_mirostat_and_other_filters_are_replaced():
    logits = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    greedy = SamplingParams(temperature=0, mirostat=2)
    got = sample(logits, greedy, prompt_ids=[], generated_ids=[], rng=request_rng(0), position=0, mu=0.0)
    assert (got.token, got.mu_after, greedy.uses_mirostat) == (0, None, False)
    # top_k=1 would keep one token; mirostat 2 at mu 2 bits keeps two, as if top-k were not set
    params = SamplingParams(mirostat=2, top_k=1, top_p=0.1, min_p=0.9, typical_p=0.1, tfs_z=0.1)
    seen = {sample(logits, params, prompt_ids=[], generated_ids=[], rng=request_rng(s), position=0, mu=2.0).token
            for s in range(40)}  # fmt: skip
    assert seen == {0, 1}


def test_the_trail_keeps_mu_per_position_and_a_rollback_returns_to_it():
    trail = MuTrail.start(5.0)
    assert trail.at(0) == 10.0
    trail.record(0, 9.5)
    trail.record(1, 9.0)
    assert [trail.at(p) for p in range(3)] == [10.0, 9.5, 9.0]
    trail.record(0, 8.0)  # token 0 accepted again after a rollback: what followed it goes
    assert trail.mus == [10.0, 8.0]


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("mirostat", 3, "mirostat must be 0 (off), 1 or 2, got 3"),
        ("mirostat", True, "mirostat must be 0 (off), 1 or 2, got True"),
        ("mirostat", 1.0, "mirostat must be 0 (off), 1 or 2, got 1.0"),
        ("mirostat_tau", 0, "mirostat_tau must be a finite number > 0, got 0"),
        ("mirostat_tau", math.inf, "mirostat_tau must be a finite number > 0, got inf"),
        ("mirostat_eta", -0.1, "mirostat_eta must be a finite number > 0, got -0.1"),
        ("mirostat_eta", math.nan, "mirostat_eta must be a finite number > 0, got nan"),
    ],
)
def test_settings_are_checked(field, value, message):
    with pytest.raises(TinyLLMError) as err:
        SamplingParams(**{field: value})
    assert str(err.value) == message
