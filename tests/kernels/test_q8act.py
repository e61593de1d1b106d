"""8-bit activations (weights="native-int8"): the kernels equal their plain PyTorch twin.

Quantizing the activations is compared bit for bit with the PyTorch form (`kernels/q8act.py`). The matmul is
compared with that form's dequantized activations times the dequantized weight. The kernel forms the same
exact products d_w q_w d_x q_x (+ m_w d_x q_x) and sums them in another order, with two extra roundings (of
d_w * d_x and of the weight's own d q + m in the reference). So the two are within 2 gamma_(K+4) of the sum of
the magnitudes of those terms, per element. For formats with a minimum that sum uses |d q| + |m| <= |w| + 2|m|,
not |w|: the kernel adds d q and m apart."""

import pytest
import torch

from helpers.quant_blocks import random_blocks, weight
from tinyllm.kernels import QuantWeight, dequantize, native, qmatmul
from tinyllm.kernels.formats import FORMATS
from tinyllm.kernels.q8act import dequantize_activations, int8_linear, quantize_activations
from tinyllm.kernels.threads import kernel_threads

U = 2.0**-24
MIN_CODES = {"Q4_1": (4, 20), "Q5_1": (4, 24), "Q4_K": (16, 144), "Q5_K": (16, 176)}  # bytes holding a block's
# codes, for the formats with a minimum


def int8_weight(fmt: str, n: int, k: int, seed: int, every_code: bool = False, limbs: int = 1) -> QuantWeight:
    """gguf's quantizer, or (every_code) random bytes where every code occurs, Q8_0's -128 included; limbs 3:
    for 24-bit activations."""
    data = torch.from_numpy(random_blocks(fmt, n, k, seed, scale=1.0)) if every_code else weight(fmt, n, k, seed).data
    return QuantWeight(data, fmt, (n, k), int8_activations=True, limbs=limbs)


def magnitudes(w: QuantWeight) -> torch.Tensor:
    """[N, K]: |d q| + |m| per weight, bounded by |w| + 2|m| (|w| for formats without a minimum)."""
    dense = dequantize(w).double().abs()
    if w.fmt not in MIN_CODES:
        return dense
    lo, hi = MIN_CODES[w.fmt]
    blocks = w.data.clone().view(w.shape[0], -1, FORMATS[w.fmt].type_size)  # [N, KB, bytes]
    blocks[..., lo:hi] = 0  # codes 0: every weight decodes to its block's m
    m = dequantize(QuantWeight(blocks.reshape(w.shape[0], -1), w.fmt, w.shape)).double().abs()
    return dense + 2 * m


def assert_within_bound(y: torch.Tensor, x: torch.Tensor, w: QuantWeight) -> None:
    q, d, _ = quantize_activations(x)
    xq = dequantize_activations(q, d)
    expected = int8_linear(x, w).double()
    k = x.shape[-1]
    gamma = (k + 4) * U / (1 - (k + 4) * U)
    bound = 2 * gamma * (xq.double().abs() @ magnitudes(w).T)  # [M, N]
    err = (y.double() - expected).abs()
    assert bool((err <= bound).all()), f"max excess {(err - bound).max().item():.3g}"


def native_quantize(x: torch.Tensor):
    lib = native.library()
    return native.quantize_activations(lib, x.contiguous())


@pytest.mark.parametrize("build", ["native", "scalar"])
def test_quantization_is_the_pytorch_form_bit_for_bit(build, monkeypatch):
    if build == "scalar":
        monkeypatch.setenv("TINYLLM_NATIVE", "scalar")
    native.reset()
    try:
        if native.library() is None:
            pytest.skip("no native kernels on this machine")
        g = torch.Generator().manual_seed(0)
        scales = torch.logspace(-40, 38, 64).reshape(64, 1)  # subnormal to near float32's largest
        rows = [torch.randn(64, 96, generator=g) * scales.clamp(max=1e36)]
        # Ties: a block whose max is 127 has d = 1 and 1 / d = 1, so x.5 lies exactly between two codes.
        tie = torch.arange(-16, 16, dtype=torch.float32) + 0.5
        tie[0] = 127.0
        rows.append(torch.cat([tie, -tie, torch.zeros(32)]).reshape(1, 96))
        special = torch.randn(3, 96, generator=g)
        special[0, 3], special[1, 40], special[2, 70] = float("nan"), float("inf"), -float("inf")
        rows.append(special)
        for x in rows:
            q, d, total = native_quantize(x)
            q_ref, d_ref, total_ref = quantize_activations(x)
            assert torch.equal(q, q_ref) and torch.equal(total, total_ref)
            assert torch.equal(d.nan_to_num(-1.0), d_ref.nan_to_num(-1.0))
        q, d, _ = native_quantize(rows[1])
        assert q[0, 1:16].tolist() == [round(v) for v in tie[1:16].tolist()]  # Python rounds half to even too
        assert d[0, 2] == 0 and bool((q[0, 64:] == 0).all())  # an all-zero block: d = 0, codes 0
        q, d, _ = native_quantize(rows[2])
        assert d.isnan().tolist() == [[True, False, False], [False, True, False], [False, False, True]]
    finally:
        native.reset()


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 64, 300])  # fours of activation rows, each remainder, prefill
def test_matmul_within_bound_of_the_pytorch_form(path, fmt, m):
    block = FORMATS[fmt].block_size  # K: one block, an odd number of 32-element blocks, and more
    for n, k, every_code in [(37, block, False), (5, 3 * block, True), (19, 5 * block, False)]:
        w = int8_weight(fmt, n, k, seed=m, every_code=every_code)
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(n)) * 3
        y = qmatmul(x, w)
        assert y.shape == (m, n) and y.dtype == torch.float32
        assert_within_bound(y, x, w)


@pytest.mark.parametrize("limbs", [1, 3])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_row_is_the_same_alone_batched_and_at_any_thread_count(fmt, limbs):
    """Every output is one chain of the same operations whatever M and the thread count are: bit for bit (and
    with 24-bit activations, its limbs' sum)."""
    if native.library() is None:
        pytest.skip("no native kernels on this machine")
    k = 3 * FORMATS[fmt].block_size
    w = int8_weight(fmt, 203, k, seed=1, limbs=limbs)
    x = torch.randn(9, k, generator=torch.Generator().manual_seed(2))
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            assert kernel_threads() == threads
            outs.append(qmatmul(x, w))
            for i in range(9):
                assert torch.equal(qmatmul(x[i : i + 1], w)[0], outs[-1][i])
        assert all(torch.equal(o, outs[0]) for o in outs)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("limbs", [1, 3])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_the_builds_give_the_same_bits(fmt, limbs, monkeypatch):
    """The AVX-512, AVX2 and portable builds run the same operations per output: equal bit for bit."""
    k = 3 * FORMATS[fmt].block_size
    w = int8_weight(fmt, 37, k, seed=4, every_code=True, limbs=limbs)
    x = torch.randn(13, k, generator=torch.Generator().manual_seed(5)) * 2
    outs = {}
    for build in ("native", "avx2", "scalar"):
        if build == "avx2" and "avx2" not in native.cpu_features().split():
            continue
        monkeypatch.setenv("TINYLLM_NATIVE", "1" if build == "native" else build)
        native.reset()
        if native.library() is None:
            pytest.skip("no native kernels on this machine")
        outs[build] = (qmatmul(x, w), qmatmul(x[4:5], w))
    native.reset()
    first = outs.pop("native")
    for build, (y, row) in outs.items():
        assert torch.equal(y, first[0]), build
        assert torch.equal(row, first[1]), build


def test_the_packed_weight_is_the_documented_size():
    """Bytes per 16 rows x 32 elements (csrc/q8act.h): the GGUF blocks' size, or 8 more for Q4_K and Q5_K (their
    6-bit scales and mins take a byte each), 80 more for MXFP4 (its values, -12..12, take five bits, its scale
    two bytes). Padded rows count as rows of their group."""
    lib = native.library()
    if lib is None:
        pytest.skip("no native kernels on this machine")
    per_512 = {"Q4_0": 288, "Q4_1": 320, "Q5_0": 352, "Q5_1": 384, "Q8_0": 544, "Q4_K": 296, "Q5_K": 360, "Q6_K": 420}
    per_512["MXFP4"] = 352
    extra = {"Q4_K": 8, "Q5_K": 8, "MXFP4": 80}
    assert set(per_512) == set(FORMATS)
    for fmt, size in per_512.items():
        spec = FORMATS[fmt]
        assert size - 16 * 32 // spec.block_size * spec.type_size == extra.get(fmt, 0), fmt
        for n, k in [(16, 256), (37, 3 * 256), (64, 2048)]:
            assert lib.tl_q8_packed_bytes(spec.ggml_type, n, k) == size * -(-n // 16) * (k // 32), (fmt, n, k)
    assert lib.tl_q8_packed_bytes(FORMATS["Q4_K"].ggml_type, 16, 96) == -1  # not whole 256-element blocks


def test_non_finite_activations_give_nan_rows_only_where_they_reach(path):
    w = int8_weight("Q4_1", 8, 64, seed=3)
    x = torch.randn(3, 64)
    x[1, 40] = float("inf")
    y = qmatmul(x, w)
    assert bool(y[1].isnan().all()) and bool(y[[0, 2]].isfinite().all())


def test_quantize_activations_names_a_bad_width():
    with pytest.raises(ValueError, match="x has 40 features, expected a multiple of 32"):
        quantize_activations(torch.randn(2, 40))


def test_the_flag_survives_row_picks():
    w = int8_weight("Q8_0", 6, 64, seed=0)
    assert w.rows(torch.tensor([4, 1])).int8_activations
