"""The packed weight layout of the integer-activation kernels (csrc/q8act.h, written by csrc/q8pack.cpp).

The packed bytes are read back here in plain PyTorch, as the layout's comment documents them, and the weights
they give, D * (code - offset) + M per element, must equal the reference dequantization bit for bit (the
products of a float16 and a small integer are exact in float32, so each weight is the one rounding the
reference makes too). Padded rows must be zero. Then the fused projections' packing from their parts
(`native.pack_parts`) against packing the stacked blocks."""

import pytest
import torch

from helpers.quant_blocks import random_blocks
from tinyllm.kernels import FORMATS, QuantWeight, dequantize, native

GROUP = 16
HEAD = {"Q4_0": 32, "Q5_0": 32, "Q8_0": 32, "Q6_K": 32, "MXFP4": 32}  # d only; the others d and m: 64
OFFSET = {"Q4_0": 8, "Q5_0": 16, "Q6_K": 32, "MXFP4": 16}
HIGH = {"Q5_0": 1, "Q5_1": 1, "Q5_K": 1, "Q6_K": 2, "MXFP4": 1}  # planes of bits above the nibble
BF16 = ("MXFP4",)  # d as bfloat16 (its E8M0 scale), not float16
K_FORMATS = ("Q4_K", "Q5_K", "Q6_K")


@pytest.fixture(scope="module")
def lib():
    lib = native.library()
    if lib is None:
        pytest.skip("no native kernels on this machine")
    return lib


def pack(lib, w: QuantWeight) -> torch.Tensor:
    spec = FORMATS[w.fmt]
    out = torch.full((lib.tl_q8_packed_bytes(spec.ggml_type, *w.shape),), 0xA5, dtype=torch.uint8)  # no byte unset
    data = w.data.contiguous()
    assert lib.tl_q8_pack(spec.ggml_type, data.data_ptr(), *w.shape, data.stride(0), out.data_ptr(), 2) == 0
    return out


def f16(b: torch.Tensor, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """[..., 2 n] bytes -> [..., n] float16 (or bfloat16) values as float32."""
    return b.contiguous().view(dtype).float()


def codes(sub: torch.Tensor, fmt: str) -> torch.Tensor:
    """A sub-block's code bytes [G, U, 16 rows' worth] -> codes [G, U, 16, 32] (element e = 4 j + t)."""
    g, u = sub.shape[:2]
    if fmt == "Q8_0":  # byte 64 j + 4 r + t, signed
        return sub.reshape(g, u, 8, GROUP, 4).view(torch.int8).int().permute(0, 1, 3, 2, 4).reshape(g, u, GROUP, 32)
    nib = sub[..., :256].reshape(g, u, 4, GROUP, 4).int()  # [G, U, j % 4, r, t]
    c = torch.cat([nib & 15, nib >> 4], dim=2)  # [G, U, j, r, t]: j < 4 the low nibbles, j >= 4 the high ones
    high = HIGH.get(fmt, 0)
    if high:
        planes = sub[..., 256:].reshape(g, u, high, GROUP, 4).int()  # [G, U, plane, r, t]
        per_plane = 8 // high
        for j in range(8):
            bits = (planes[:, :, j // per_plane] >> (high * (j % per_plane))) & ((1 << high) - 1)
            c[:, :, j] |= bits << 4
    return c.permute(0, 1, 3, 2, 4).reshape(g, u, GROUP, 32)


def unpack(packed: torch.Tensor, fmt: str, n: int, k: int) -> torch.Tensor:
    """The packed bytes read as the layout documents them -> float32 weights [ceil(N/16) * 16, K]."""
    subs = 8 if fmt in K_FORMATS else 1
    head, ints = HEAD.get(fmt, 64), 32 if fmt in K_FORMATS else 0
    code_bytes = 512 if fmt == "Q8_0" else 256 + 64 * HIGH.get(fmt, 0)
    units = k // (32 * subs)
    unit = packed.reshape(-1, units, head + subs * (ints + code_bytes))  # [G, U, bytes]
    g = unit.shape[0]
    d = f16(unit[..., :32], torch.bfloat16 if fmt in BF16 else torch.float16).reshape(g, units, 1, GROUP, 1)
    m = f16(unit[..., 32:64]).reshape(g, units, 1, GROUP, 1) if head == 64 else torch.zeros(())
    per_sub = unit[..., head:].reshape(g, units, subs, ints + code_bytes)
    c = torch.stack([codes(per_sub[:, :, s, ints:], fmt) for s in range(subs)], dim=2)  # [G, U, S, r, 32]
    c = (c - OFFSET.get(fmt, 0)).float()
    if fmt in K_FORMATS:
        s0 = per_sub[..., :16].view(torch.int8).float().unsqueeze(-1)  # [G, U, S, r, 1]
        s1 = per_sub[..., 16:32].view(torch.int8).float().unsqueeze(-1)
        if fmt == "Q6_K":  # elements 0..15 scaled by d s0, 16..31 by d s1
            scale = torch.cat([(d * s0).expand(-1, -1, -1, -1, 16), (d * s1).expand(-1, -1, -1, -1, 16)], -1)
            w = scale * c
        else:
            w = (d * s0) * c + m * s1
    else:
        w = d * c + m
    return w.permute(0, 3, 1, 2, 4).reshape(g * GROUP, k)  # [rows, U, S, 32] -> [rows, K]


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("n", [16, 37])  # whole groups, and a last group padded with zero rows
def test_the_packed_layout_gives_the_reference_weights_bit_for_bit(lib, fmt, n):
    k = 2 * FORMATS[fmt].block_size if fmt in K_FORMATS else 3 * FORMATS[fmt].block_size
    w = QuantWeight(torch.from_numpy(random_blocks(fmt, n, k, seed=n, scale=1.0)), fmt, (n, k))
    got = unpack(pack(lib, w), fmt, n, k)
    assert torch.equal(got[:n], dequantize(w))
    assert bool((got[n:] == 0).all())  # padded rows: zero scales and codes


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_parts_packed_in_turn_equal_the_stacked_blocks_packed(lib, fmt):
    """Every part but the last a whole number of 16-row groups: the stack's packed form, byte for byte, and the
    weight holds no blocks of its own."""
    k = FORMATS[fmt].block_size * (1 if fmt in K_FORMATS else 3)
    parts = [QuantWeight(torch.from_numpy(random_blocks(fmt, n, k, seed=n)), fmt, (n, k)) for n in (32, 16, 7)]
    stacked = QuantWeight(torch.cat([p.data for p in parts]), fmt, (55, k))
    fused = native.pack_parts(lib, parts)
    assert fused.shape == (55, k) and fused.data.is_meta
    assert torch.equal(native.packed(lib, fused), pack(lib, stacked))


def test_parts_that_split_a_group_are_left_to_be_stacked(lib):
    """A part of 10 rows before one of 16: their groups would not be the stack's (the sizes alone agree)."""
    parts = [QuantWeight(torch.from_numpy(random_blocks("Q4_0", n, 64, seed=n)), "Q4_0", (n, 64)) for n in (10, 16)]
    spec = FORMATS["Q4_0"]
    sizes = [lib.tl_q8_packed_bytes(spec.ggml_type, p.shape[0], 64) for p in parts]
    assert sum(sizes) == lib.tl_q8_packed_bytes(spec.ggml_type, 26, 64)
    assert native.pack_parts(lib, parts) is None
