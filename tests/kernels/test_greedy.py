"""The native greedy draw (kernels/greedy.py) against the torch computation it replaces: the first maximum,
log_softmax at it, and -sum p log p; rows with -inf entries, ties, wide and narrow ranges, odd widths."""

import math

import pytest
import torch

from tinyllm.kernels import native
from tinyllm.kernels.greedy import greedy_rows

pytestmark = pytest.mark.skipif(native.library() is None, reason="no native kernels on this machine")


def torch_greedy(rows: torch.Tensor):
    rows = rows.double()
    logp = torch.log_softmax(rows, dim=-1)
    probs = logp.exp()
    tokens = rows.argmax(-1)
    entropy = -torch.where(probs > 0, probs * logp, torch.zeros_like(probs)).sum(-1)
    return tokens.tolist(), logp.gather(-1, tokens[:, None])[:, 0].tolist(), entropy.tolist()


def rows_of(kind: str, v: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, v, generator=g)
    if kind == "wide":
        x = x * 40
    elif kind == "narrow":
        x = x * 1e-3
    elif kind == "masked":
        x[torch.rand(5, v, generator=g) < 0.7] = float("-inf")
        x[:, v // 2] = 0.5  # at least one finite value per row
    elif kind == "ties":
        x = torch.randint(0, 4, (5, v), generator=g).float()
    return x


@pytest.mark.parametrize("kind", ["plain", "wide", "narrow", "masked", "ties"])
@pytest.mark.parametrize("v", [1, 7, 8, 49, 4096 + 3])
def test_equals_the_torch_computation(kind, v, threads):
    rows = rows_of(kind, v, seed=v)
    tokens, logprobs, entropies = greedy_rows(rows)
    ref_tokens, ref_logprobs, ref_entropies = torch_greedy(rows)
    assert tokens == ref_tokens  # the first maximum on ties
    assert logprobs == pytest.approx(ref_logprobs, abs=1e-6)
    assert entropies == pytest.approx(ref_entropies, abs=1e-6)


def test_one_sure_token_and_a_uniform_row():
    rows = torch.tensor([[0.0, float("-inf"), float("-inf")], [2.0, 2.0, 2.0]])
    tokens, logprobs, entropies = greedy_rows(rows)
    assert tokens == [0, 0] and logprobs[0] == 0.0 and entropies[0] == 0.0
    assert logprobs[1] == pytest.approx(-math.log(3)) and entropies[1] == pytest.approx(math.log(3))


@pytest.mark.parametrize("bad", [float("nan"), "all-inf"])
def test_nan_or_no_finite_value_names_the_first_such_row(bad, threads):
    rows = torch.zeros(9, 20)
    for r in (6, 1):
        if bad == "all-inf":
            rows[r] = float("-inf")
        else:
            rows[r, 17] = bad
    with pytest.raises(ValueError, match="row 1 "):
        greedy_rows(rows)


def test_a_rows_result_is_the_same_bits_alone_batched_and_at_any_thread_count():
    """A row's spans are fixed (8192 logits each), so its sums are added in one order however many threads
    share its two passes and whatever rows come with it; across spans the first maximum is still the first."""
    v = 3 * 8192 + 5
    rows = rows_of("plain", v, seed=3)
    rows[1, 8192 + 7] = rows[1, 2 * 8192 + 1] = 50.0  # a tie across spans: the earlier index wins
    rows[2, v - 1] = 60.0  # the maximum in the tail
    before = torch.get_num_threads()
    try:
        got = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            got.append(greedy_rows(rows))
            got.append([greedy_rows(rows[i : i + 1]) for i in range(rows.shape[0])])
    finally:
        torch.set_num_threads(before)
    batched, alone = got[0], got[1]
    assert batched[0][1:3] == [8192 + 7, v - 1]
    assert got[2] == batched and all(g == alone for g in got[1::2])
    assert [tuple(x[0] for x in a) for a in alone] == list(zip(*batched))
    ref = torch_greedy(rows)
    assert batched[0] == ref[0] and batched[1] == pytest.approx(ref[1], abs=1e-6)
