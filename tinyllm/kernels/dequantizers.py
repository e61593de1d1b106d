"""Pure-PyTorch dequantization of each GGUF block format: vectorised over a [num_blocks, type_size] uint8 view,
one function a format (formats.py's table points at it).

These are the reference every native kernel is tested against and the fallback path when none is built. The
arithmetic follows gguf-py's order of operations (scale products first, then `d * q (+ m | - dm)`) so the
result is bit-identical to `gguf.quants.dequantize`."""

from __future__ import annotations

import torch

QK_K = 256


def _f16(b: torch.Tensor) -> torch.Tensor:
    """Two little-endian bytes per block -> float32 [num_blocks, 1]."""
    return b.contiguous().view(torch.float16).float()  # [NB, 1]


def _nibbles(qs: torch.Tensor, group: int) -> torch.Tensor:
    """Bytes in groups of `group`: each group's low nibbles, then its high nibbles. [NB, B] -> [NB, 2B] uint8."""
    nb = qs.shape[0]
    q = qs.reshape(nb, -1, 1, group)  # [NB, G, 1, group]
    return torch.cat([q & 0x0F, q >> 4], dim=2).reshape(nb, -1)  # [NB, 2B]


def _bits32(qh: torch.Tensor) -> torch.Tensor:
    """A little-endian uint32 per block -> its 32 bits, bit j at column j. [NB, 4] -> [NB, 32] uint8."""
    shifts = torch.arange(8, dtype=torch.uint8)
    return ((qh.unsqueeze(-1) >> shifts) & 1).reshape(qh.shape[0], 32)  # [NB, 32]


def q4_0(b):
    d = _f16(b[:, 0:2])
    q = _nibbles(b[:, 2:18], 16).to(torch.int8) - 8
    return d * q.float()


def q4_1(b):
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    return d * _nibbles(b[:, 4:20], 16).float() + m


def q5_0(b):
    d = _f16(b[:, 0:2])
    q = (_nibbles(b[:, 6:22], 16) | (_bits32(b[:, 2:6]) << 4)).to(torch.int8) - 16
    return d * q.float()


def q5_1(b):
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    q = _nibbles(b[:, 8:24], 16) | (_bits32(b[:, 4:8]) << 4)
    return d * q.float() + m


def q8_0(b):
    d = _f16(b[:, 0:2])
    return b[:, 2:34].contiguous().view(torch.int8).float() * d


def k_scale_min(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K/Q5_K: twelve bytes -> eight 6-bit scales and eight 6-bit mins. [NB, 12] -> 2 x [NB, 8] uint8."""
    s = scales.reshape(-1, 3, 4)  # [NB, 3, 4]
    d, m, md = s[:, 0], s[:, 1], s[:, 2]
    sc = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=-1)  # [NB, 8]
    mn = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=-1)  # [NB, 8]
    return sc, mn


def _k_affine(b, q):
    """Shared tail of Q4_K/Q5_K: (d * scale) * q - (dmin * min) per 32-element sub-block."""
    nb = b.shape[0]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = k_scale_min(b[:, 4:16])
    dl = (d * sc.float()).reshape(nb, 8, 1)  # [NB, 8, 1]
    ml = (dmin * mn.float()).reshape(nb, 8, 1)  # [NB, 8, 1]
    return (dl * q.reshape(nb, 8, 32).float() - ml).reshape(nb, QK_K)


def q4_k(b):
    return _k_affine(b, _nibbles(b[:, 16:144], 32))


def q5_k(b):
    nb = b.shape[0]
    ql = _nibbles(b[:, 48:176], 32).reshape(nb, 8, 32)  # [NB, 8, 32]
    shifts = torch.arange(8, dtype=torch.uint8).reshape(1, 8, 1)
    qh = (b[:, 16:48].reshape(nb, 1, 32) >> shifts) & 1  # [NB, 8, 32]
    return _k_affine(b, ql | (qh << 4))


def q6_k(b):
    nb = b.shape[0]
    ql = _nibbles(b[:, 0:128], 64).reshape(nb, 8, 32)  # [NB, 8, 32]
    shifts = torch.arange(0, 8, 2, dtype=torch.uint8).reshape(1, 1, 4, 1)
    qh = ((b[:, 128:192].reshape(nb, 2, 1, 32) >> shifts) & 3).reshape(nb, 8, 32)  # [NB, 8, 32]
    q = (ql | (qh << 4)).to(torch.int8) - 32
    scales = b[:, 192:208].contiguous().view(torch.int8).float()  # [NB, 16]
    dl = (_f16(b[:, 208:210]) * scales).reshape(nb, 16, 1)  # [NB, 16, 1]
    return (dl * q.reshape(nb, 16, 16).float()).reshape(nb, QK_K)


# E2M1's sixteen values, doubled so they are integers (code 8 is +0 as well); the block's scale is halved to match.
MXFP4_VALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)


def e8m0_half(e: torch.Tensor) -> torch.Tensor:
    """E8M0 bytes -> half their power of two, 2^(e - 128), as float32 (exact: e = 0, 1 are subnormals)."""
    e = e.to(torch.int32)
    bits = torch.where(e < 2, 0x00200000 << e, (e - 1) << 23)  # float32 bits: a subnormal, or exponent e - 1
    return bits.view(torch.float32)


def mxfp4(b):
    d = e8m0_half(b[:, 0:1])  # [NB, 1]
    q = _nibbles(b[:, 1:17], 16).long()  # [NB, 32]
    return d * torch.tensor(MXFP4_VALUES, dtype=torch.float32)[q]
