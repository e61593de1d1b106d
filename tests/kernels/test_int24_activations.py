"""24-bit activations (weights="native-int24"): each activation row quantized as three 8-bit limbs, the 8-bit
kernel run on them as rows, their products summed. (That a row is the same alone, batched, at any thread count
and in every build: tests/kernels/test_q8act.py, with limbs 3.)

The limbs are compared bit for bit with their PyTorch form (`quantize_limbs`). The matmul is held to a bound
built from that form. Per limb and output the kernel sums each 32-element block's products exactly in an
int32, then runs one chain of at most two fmas a block (csrc/q8act.cpp), each term's scale a product of one
rounding; the reference's weight is d q + m rounded once; the limbs' products are added with two roundings. So
the result is within gamma_(2 KB + 6) (KB: the row's 32-element blocks) of the summed magnitudes of every
limb's terms, plus what the three limbs leave of x, |x - sum of the limbs' q d|, times |w|. That remainder is
at most 2^-24 of the block's largest magnitude (checked below), so the result is as close to x @ w as float32
arithmetic gets: a kernel that ran two limbs lands outside (checked). The PyTorch fallback multiplies each
limb's float32 q d by the float32 weight (K roundings a dot product): gamma_(K + 6) there."""

import pytest
import torch
from test_q8act import int8_weight, magnitudes  # magnitudes: |d q| + |m| per weight (added apart)

from tinyllm.kernels import QuantWeight, dequantize, native, qmatmul
from tinyllm.kernels.formats import FORMATS
from tinyllm.kernels.q8act import dequantize_activations, quantize_limbs

U = 2.0**-24
LIMBS = 3


def int24_weight(fmt: str, n: int, k: int, seed: int, every_code: bool = False) -> QuantWeight:
    return int8_weight(fmt, n, k, seed, every_code, limbs=LIMBS)


def taken(x: torch.Tensor) -> list[torch.Tensor]:
    """The limbs' q * d [..., K] in float64 (exact: an 8-bit code times a float32)."""
    return [dequantize_activations(q.double(), d.double()) for q, d, _ in quantize_limbs(x, LIMBS)]


def excess(y: torch.Tensor, x: torch.Tensor, w: QuantWeight, fallback: bool = False) -> float:
    """The largest amount by which y's error exceeds the bound above (<= 0: within it)."""
    roundings = (x.shape[-1] if fallback else 2 * x.shape[-1] // 32) + 6
    gamma = roundings * U / (1 - roundings * U)
    dense = dequantize(w).double()
    limbs = taken(x)
    left = x.double() - sum(limbs)  # what the limbs leave of x
    bound = gamma * sum(t.abs() @ magnitudes(w).T for t in limbs) + left.abs() @ dense.abs().T
    return ((y.double() - x.double() @ dense.T).abs() - bound).max().item()


def assert_within_bound(y: torch.Tensor, x: torch.Tensor, w: QuantWeight, fallback: bool) -> None:
    over = excess(y, x, w, fallback)
    assert over <= 0, f"max excess {over:.3g}"


@pytest.mark.parametrize("path", ["native", "avx2", "scalar"], indirect=True)
def test_the_limbs_are_the_pytorch_form_bit_for_bit(path):
    lib = native.library()
    g = torch.Generator().manual_seed(0)
    scales = torch.logspace(-30, 30, 16).reshape(16, 1)
    x = torch.randn(16, 96, generator=g) * scales * torch.exp(torch.randn(16, 96, generator=g))
    x[3, 5], x[7, 40], x[9, 70] = float("nan"), float("inf"), -float("inf")
    x[11, 32:64] = 0.0
    q, d, total = native.quantize_activations(lib, x.contiguous(), LIMBS)
    for limb, (q_ref, d_ref, total_ref) in enumerate(quantize_limbs(x, LIMBS)):
        assert torch.equal(q[limb::LIMBS], q_ref) and torch.equal(total[limb::LIMBS], total_ref), limb
        assert torch.equal(d[limb::LIMBS].nan_to_num(-1.0), d_ref.nan_to_num(-1.0)), limb
    # a non-finite block is NaN in every limb; an all-zero one zero in every limb
    assert all(bool(d[3 * LIMBS + limb, 0].isnan()) for limb in range(LIMBS))
    assert all(d[11 * LIMBS + limb, 1] == 0 for limb in range(LIMBS))


def test_three_limbs_leave_at_most_2_to_the_minus_24_of_a_block():
    """Each limb leaves at most half its d (plus the roundings of x / d and of the remainder), and the next d is
    that over 127: the remainder after three is below amax / (2 * 127 * 254^2) = 2^-24 * 1.0238 amax."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 1024, generator=g) * torch.exp(3 * torch.randn(64, 1024, generator=g))
    left = (x.double() - sum(taken(x))).reshape(64, -1, 32).abs().amax(-1)  # [M, KB]
    amax = x.double().reshape(64, -1, 32).abs().amax(-1)
    assert bool((left <= amax / (2 * 127 * 254**2) * (1 + 2**-16)).all())
    assert bool((left > amax * 2**-40).any())  # the third limb's own remainder, not nothing


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("m", [1, 2, 3, 5, 64])
def test_matmul_within_float32_of_the_exact_product(path, fmt, m):
    block = FORMATS[fmt].block_size
    for n, k, every_code in [(37, block, False), (5, 3 * block, True), (19, 5 * block, False)]:
        w = int24_weight(fmt, n, k, seed=m, every_code=every_code)
        g = torch.Generator().manual_seed(n)
        x = torch.randn(m, k, generator=g) * torch.exp(torch.randn(m, k, generator=g))
        y = qmatmul(x, w)
        assert y.shape == (m, n) and y.dtype == torch.float32
        assert_within_bound(y, x, w, fallback=path == "fallback")


def test_two_limbs_would_be_outside_the_bound():
    lib = native.library()
    if lib is None:
        pytest.skip("no native kernels on this machine")
    for fmt in ("Q4_0", "Q4_K", "Q6_K"):
        w = int24_weight(fmt, 19, 5 * FORMATS[fmt].block_size, seed=3)
        n, k = w.shape
        g = torch.Generator().manual_seed(6)
        x = torch.randn(5, k, generator=g) * torch.exp(torch.randn(5, k, generator=g))
        y = {}
        for limbs in (2, LIMBS):
            y[limbs] = torch.empty(5, n)
            data = native.packed(lib, w).data_ptr()
            lib.tl_qmatmul_q8(w.format.ggml_type, x.data_ptr(), 5, k, data, n, y[limbs].data_ptr(), 1, limbs)
        assert torch.equal(y[LIMBS], qmatmul(x, w))
        assert excess(y[LIMBS], x, w) <= 0 < excess(y[2], x, w), fmt


def test_limbs_are_checked_and_survive_row_picks():
    w = int24_weight("Q8_0", 6, 64, seed=0)
    picked = w.rows(torch.tensor([4, 1]))
    assert picked.int8_activations and picked.limbs == LIMBS
    with pytest.raises(ValueError, match="limbs must be 1 .8-bit activations. or 3 .24-bit., got 2"):
        QuantWeight(w.data, "Q8_0", (6, 64), int8_activations=True, limbs=2)
