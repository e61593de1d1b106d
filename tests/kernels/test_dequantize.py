"""The reference dequantize equals gguf's own, bit for bit; the native decode equals the reference; bad weights
are refused with a sentence naming the value."""

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from helpers.quant_blocks import quantized, random_blocks
from tinyllm.kernels import FORMATS, QuantWeight, check_blocks, dequantize, native
from tinyllm.kernels.reference import SCALE_OFFSETS

ALL = list(FORMATS)


@pytest.mark.parametrize("fmt", ALL)
def test_reference_equals_gguf_on_quantized_blocks(fmt):
    f = FORMATS[fmt]
    raw, _ = quantized(fmt, 7, 3 * f.block_size, seed=1)
    expected = quants.dequantize(raw, GGMLQuantizationType[fmt])
    got = dequantize(QuantWeight(torch.from_numpy(raw), fmt, (7, 3 * f.block_size)))
    assert torch.equal(got, torch.from_numpy(expected))


@pytest.mark.parametrize("fmt", ALL)
def test_reference_equals_gguf_on_every_bit_pattern(fmt):
    """Random bytes: every quant value, high bit and 6-bit scale occurs, and fp16 fields span all finite values."""
    f = FORMATS[fmt]
    raw = random_blocks(fmt, 64, 2 * f.block_size, seed=2)
    expected = quants.dequantize(raw, GGMLQuantizationType[fmt])
    got = dequantize(QuantWeight(torch.from_numpy(raw), fmt, (64, 2 * f.block_size)))
    assert torch.equal(got, torch.from_numpy(expected))


def use_build(simd: str, monkeypatch) -> None:
    """The native kernels for this CPU, its AVX2 build (where it has AVX-512 too), or the portable one."""
    if simd == "avx2" and not {"avx2", "avx512f"} <= set(native.cpu_features().split()):
        pytest.skip("the native build is the AVX2 one on this CPU, or it has no AVX2")
    if simd != "native":
        monkeypatch.setenv("TINYLLM_NATIVE", simd)
    native.reset()


@pytest.mark.parametrize("simd", ["native", "avx2", "scalar"])
@pytest.mark.parametrize("fmt", ALL)
def test_native_decode_is_bit_identical(fmt, simd, monkeypatch):
    """The kernels decode each weight with the reference's operations in its order: no rounding differs."""
    use_build(simd, monkeypatch)
    try:
        lib = native.library()
        if lib is None:
            pytest.skip("no native kernels on this machine")
        f = FORMATS[fmt]
        w = QuantWeight(torch.from_numpy(random_blocks(fmt, 29, 3 * f.block_size, seed=3)), fmt, (29, 3 * f.block_size))
        if simd == "scalar":
            assert lib.tl_simd() == 0
        assert torch.equal(native.dequantize_rows(lib, w, 0, 29), dequantize(w))
        assert torch.equal(native.dequantize_rows(lib, w, 5, 12), dequantize(w)[5:12])
    finally:
        native.reset()


def every_mxfp4_block() -> np.ndarray:
    """uint8 [256, 17]: each E8M0 scale once (2^-128, a subnormal, to 2^127), with every code as a low and as a
    high nibble."""
    codes = np.arange(16, dtype=np.uint8)
    blocks = np.empty((256, 17), dtype=np.uint8)
    blocks[:, 0] = np.arange(256)
    blocks[:, 1:] = codes | (codes[::-1] << 4)
    return blocks


def test_mxfp4_reference_is_gguf_bit_for_bit_at_every_scale_and_code():
    raw = every_mxfp4_block()
    with np.errstate(over="ignore"):  # the largest scales times 12 overflow to infinity, as in ggml
        expected = torch.from_numpy(quants.dequantize(raw, GGMLQuantizationType.MXFP4))
    got = dequantize(QuantWeight(torch.from_numpy(raw), "MXFP4", (256, 32)))
    assert torch.equal(got.view(torch.int32), expected.view(torch.int32))  # the bits: +0 stays +0
    # e = 128: E2M1's 0.5 times 2^1; e = 0: the smallest, code 9 its negative; e = 255: 2^127, twice it overflows
    assert got[128, 1] == 1 and got[0, 1] == 2.0**-128 and got[0, 9] == -(2.0**-128)
    assert got[255, 1] == 2.0**127 and got[255, 2] == float("inf")


@pytest.mark.parametrize("simd", ["native", "avx2", "scalar"])
def test_mxfp4_native_decode_is_the_reference_bits_at_every_scale_and_code(simd, monkeypatch):
    use_build(simd, monkeypatch)
    try:
        lib = native.library()
        if lib is None:
            pytest.skip("no native kernels on this machine")
        w = QuantWeight(torch.from_numpy(every_mxfp4_block()), "MXFP4", (256, 32))
        got = native.dequantize_rows(lib, w, 0, 256)
        assert torch.equal(got.view(torch.int32), dequantize(w).view(torch.int32))
    finally:
        native.reset()


def test_rows_selects_rows():
    raw, _ = quantized("Q8_0", 10, 64, seed=4)
    w = QuantWeight(torch.from_numpy(raw), "Q8_0", (10, 64))
    index = torch.tensor([7, 0, 7, 3])
    picked = w.rows(index)
    assert picked.shape == (4, 64)
    assert torch.equal(dequantize(picked), dequantize(w)[index])


def test_unknown_format_names_itself_and_the_supported_ones():
    with pytest.raises(ValueError) as e:
        QuantWeight(torch.zeros(2, 18, dtype=torch.uint8), "IQ2_XS", (2, 32))
    assert "IQ2_XS" in str(e.value) and all(name in str(e.value) for name in FORMATS)


@pytest.mark.parametrize(
    "data, shape, words",
    [
        (torch.zeros(2, 19, dtype=torch.uint8), (2, 32), ["19", "18"]),  # wrong bytes per row
        (torch.zeros(3, 18, dtype=torch.uint8), (2, 32), ["3", "N=2"]),  # wrong row count
        (torch.zeros(2, 18, dtype=torch.uint8), (2, 48), ["K=48", "32"]),  # K not a multiple of the block
        (torch.zeros(2, 18, dtype=torch.int16), (2, 32), ["uint8", "int16"]),  # wrong dtype
    ],
)
def test_bad_layout_is_refused_with_the_values(data, shape, words):
    with pytest.raises(ValueError) as e:
        QuantWeight(data, "Q4_0", shape)
    assert all(word in str(e.value) for word in words)


@pytest.mark.parametrize("fmt", ALL)
@pytest.mark.parametrize("bad", [np.float16("nan"), np.float16("inf"), np.float16("-inf")])
def test_check_blocks_refuses_a_non_finite_scale(fmt, bad):
    f = FORMATS[fmt]
    raw, _ = quantized(fmt, 4, 2 * f.block_size, seed=5)
    w = QuantWeight(torch.from_numpy(raw.copy()), fmt, (4, 2 * f.block_size))
    check_blocks(w)  # a healthy table passes
    for off in SCALE_OFFSETS[fmt]:
        corrupt = raw.copy().reshape(4, 2, f.type_size)
        corrupt[2, 1, off : off + 2] = np.array([bad], dtype=np.float16).view(np.uint8)
        with pytest.raises(ValueError, match="block 1 of row 2"):
            check_blocks(QuantWeight(torch.from_numpy(corrupt.reshape(4, -1)), fmt, (4, 2 * f.block_size)))
