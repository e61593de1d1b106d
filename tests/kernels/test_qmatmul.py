"""qmatmul (native kernels and the fallback) equals dequantize + F.linear within float32 summation order.

The bound: the kernels decode every weight bit-identically to the reference (test_dequantize checks it), so
the two results are the same K products summed in different orders. Any order of a float32 sum of K terms
(with or without FMA) is within gamma_K * sum_k |x_k w_k| of the exact value, gamma_K = K u / (1 - K u),
u = 2^-24; the two results are therefore within 2 gamma_K * (|x| @ |W|^T) of each other, per element."""

import importlib
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from helpers.quant_blocks import weight
from tinyllm.kernels import FORMATS, dequantize, native, qmatmul
from tinyllm.kernels.qmatmul import lookup_rows

ALL = list(FORMATS)
U = 2.0**-24
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def assert_within_summation_bound(y: torch.Tensor, x: torch.Tensor, w_dense: torch.Tensor) -> None:
    k = x.shape[-1]
    expected = F.linear(x.float(), w_dense)
    gamma = k * U / (1 - k * U)
    bound = 2 * gamma * (x.double().abs() @ w_dense.double().abs().T)  # [..., N]
    err = (y.double() - expected.double()).abs()
    assert bool((err <= bound).all()), f"max excess {(err - bound).max().item():.3g}"


@pytest.mark.parametrize("fmt", ALL)
# 1: one-row kernel; 2 (up to 3 for the K-quants, 6 for the others; 7 on AVX2): decode-in-registers tiles; 7, 8,
# 13, 64: decoded-buffer register tile (13 leaves a remainder of activation rows); 300: the BLAS path.
@pytest.mark.parametrize("m", [1, 2, 7, 8, 13, 64, 300])
def test_qmatmul_within_summation_bound(path, fmt, m):
    block = FORMATS[fmt].block_size
    for n, k in [(37, block), (5, 3 * block)]:  # odd N; K one block and K = 3 blocks (not a SIMD multiple)
        w = weight(fmt, n, k, seed=m)
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(n))
        y = qmatmul(x, w)
        assert y.shape == (m, n) and y.dtype == torch.float32
        assert_within_summation_bound(y, x, dequantize(w))


@pytest.mark.parametrize("fmt", ALL)
def test_a_row_is_the_same_bits_at_any_number_of_rows(path, fmt):
    """The native kernels for one row, a few rows (groups of up to six rows, three with AVX2's registers; with
    AVX-512 two weight rows at once, the odd last one alone: n = 37; one row: four weight rows at once, then two
    (n = 70) or one) and more (the decoded-buffer register tile,
    from 7 to 10 rows by format and build) sum every output in one order, so
    each row of a batch is the row computed alone, bit for bit, at any thread count: what the native step's
    batch invariance rests on (it calls the kernels at every M; the module path's BLAS above BLAS_MIN_M is not
    part of this)."""
    if path == "fallback":
        pytest.skip("F.linear makes no such promise")
    lib = native.library()
    block = FORMATS[fmt].block_size
    before = torch.get_num_threads()
    try:
        for n, k in [(37, 2 * block), (70, 3 * block)]:
            w = weight(fmt, n, k, seed=n)
            x = torch.randn(64, k, generator=torch.Generator().manual_seed(k))
            alone = torch.empty(64, n)
            for i in range(64):
                native.matmul_into(lib, x[i : i + 1].contiguous(), 1, w, alone[i : i + 1])
            for threads in (1, 2):
                torch.set_num_threads(threads)
                for m in (2, 3, 4, 5, 6, 7, 8, 9, 13, 64):
                    y = torch.empty(m, n)
                    native.matmul_into(lib, x[:m].contiguous(), m, w, y)
                    assert torch.equal(y, alone[:m]), (n, k, threads, m)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("fmt", ["Q4_1", "Q6_K"])
def test_a_prompt_sized_batch_splits_on_the_threads_and_keeps_each_rows_bits(path, fmt):
    """Past 2^16 activations the tile kernel's reordering of x runs in chunks on the pool: every row is
    still the row computed alone, at 1, 2 and 3 threads (a gap or overlap between chunks would not be)."""
    if path == "fallback":
        pytest.skip("F.linear makes no such promise")
    lib = native.library()
    k = 3 * FORMATS[fmt].block_size
    m = (1 << 16) // k + 5  # just past the threshold, not a multiple of any chunk count
    w = weight(fmt, 21, k, seed=3)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(5))
    alone = torch.empty(m, 21)
    for i in range(m):
        native.matmul_into(lib, x[i : i + 1].contiguous(), 1, w, alone[i : i + 1])
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            y = torch.full((m, 21), float("nan"))
            native.matmul_into(lib, x, m, w, y)
            assert torch.equal(y, alone), threads
    finally:
        torch.set_num_threads(before)
    assert_within_summation_bound(alone, x, dequantize(w))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("m", [1, 5, 13, 40])
def test_threads_split_rows_without_gaps(path, threads, m):
    """Row chunks per thread cover N exactly, with N not a multiple of the chunk alignment."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        w = weight("Q4_1", 203, 96, seed=threads)
        x = torch.randn(m, 96)
        assert_within_summation_bound(qmatmul(x, w), x, dequantize(w))
    finally:
        torch.set_num_threads(before)


def test_leading_dims_and_non_contiguous_x(path):
    w = weight("Q5_K", 19, 512, seed=1)
    x3 = torch.randn(3, 512, 4).transpose(1, 2)  # [3, 4, 512], non-contiguous
    y = qmatmul(x3, w)
    assert y.shape == (3, 4, 19)
    assert_within_summation_bound(y, x3, dequantize(w))
    x1 = torch.randn(2, 1024)[:, ::2][0]  # [512], strided
    assert_within_summation_bound(qmatmul(x1, w), x1, dequantize(w))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_x_computes_in_float32_and_returns_its_dtype(path, dtype):
    w = weight("Q8_0", 9, 64, seed=2)
    x = torch.randn(2, 64).to(dtype)
    y = qmatmul(x, w)
    assert y.dtype == dtype
    assert torch.equal(y, qmatmul(x.float(), w).to(dtype))


def test_large_n_uses_several_tiles(path):
    """The BLAS path cuts N into tiles when a dequantized weight passes the tile size."""
    module = importlib.import_module("tinyllm.kernels.qmatmul")
    w = weight("Q4_0", 4100, 1024, seed=3)  # 16 MiB as float32: two tiles of 8 MiB, and a rest
    x = torch.randn(module.BLAS_MIN_M + 1, 1024)
    assert_within_summation_bound(qmatmul(x, w), x, dequantize(w))


@pytest.mark.parametrize("fmt", ALL)
def test_lookup_rows_are_the_reference_rows_bit_for_bit(path, fmt):
    w = weight(fmt, 11, 2 * FORMATS[fmt].block_size, seed=5)
    dense = dequantize(w)
    for index in ([7], [0, 10, 3, 3]):  # a lone row (read in place) and a gathered, repeated set
        assert torch.equal(lookup_rows(w, torch.tensor(index)), dense[index])
    with pytest.raises(IndexError):
        lookup_rows(w, torch.tensor([11]))


def test_wrong_feature_count_names_both():
    w = weight("Q4_0", 3, 64)
    with pytest.raises(ValueError, match="32 features, expected K=64"):
        qmatmul(torch.randn(2, 32), w)


@pytest.mark.slow
def test_fallback_warns_once_with_the_reason():
    code = (
        "import warnings, torch\n"
        "from tinyllm.kernels import qmatmul, native_available\n"
        "from tests.helpers.quant_blocks import weight\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    w = weight('Q4_1', 4, 32)\n"
        "    for _ in range(3): qmatmul(torch.randn(1, 32), w)\n"
        "    assert not native_available()\n"
        "print(len(caught)); print(caught[0].message)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TINYLLM_NATIVE": "0"},
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    count, message = done.stdout.splitlines()[:2]
    assert count == "1" and "TINYLLM_NATIVE=0" in message
