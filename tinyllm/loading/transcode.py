"""Q3_K blocks rewritten as Q6_K blocks holding the same values, so that a Q3_K tensor runs on the Q6_K
kernels (both executors) instead of being expanded to float32 at load (1.9x its bytes instead of 9.3x).

Both formats are a float16 scale d per 256 weights times an integer scale per 16 weights times an integer
weight: Q3_K's scales are 6-bit (-32..31) and its weights 3-bit (-4..3), which Q6_K's int8 scales and 6-bit
weights (-32..31) hold as they are. Each value d * s * q is exact in float32 either way (11 + 6 + 3 bits), so
the dequantized weights are equal bit for bit.

Q3_K block (110 bytes): hmask[32] (each weight's high bit), qs[64] (low 2 bits), scales[12] (16 6-bit values),
d. Q6_K block (210 bytes): ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8), d.
"""

from __future__ import annotations

import numpy as np

Q3_K_BYTES, Q6_K_BYTES = 110, 210
_LOW2, _LOW4 = np.uint32(0x03030303), np.uint32(0x0F0F0F0F)


def q3_k_as_q6_k(blocks: np.ndarray) -> np.ndarray:
    """uint8 [..., nb * 110] Q3_K rows -> uint8 [..., nb * 210] Q6_K rows of the same values."""
    lead = blocks.shape[:-1]
    b = np.ascontiguousarray(blocks).reshape(-1, Q3_K_BYTES)  # [B, 110]
    out = np.empty((b.shape[0], Q6_K_BYTES), dtype=np.uint8)  # [B, 210]
    q6 = (_q3_k_weights(b) + 32).astype(np.uint8)  # [B, 256] in 28..35
    out[:, :128], out[:, 128:192] = _q6_k_low_high(q6)
    out[:, 192:208] = (_q3_k_scales(b) - 32).astype(np.int8).view(np.uint8)
    out[:, 208:210] = b[:, 108:110]  # d, the same float16
    return out.reshape(*lead, -1)


def _q3_k_weights(b: np.ndarray) -> np.ndarray:
    """[B, 110] -> int8 [B, 256]: weight 128n + 32j + l is bits 2j..2j+1 of qs[32n + l], minus 4 unless bit
    4n + j of hmask[l] is set."""
    qs = b[:, 32:96].reshape(-1, 2, 1, 32)  # [B, n, 1, l]
    hmask = b[:, None, None, :32]  # [B, 1, 1, l]
    j = np.arange(4, dtype=np.uint8)[None, None, :, None]  # [1, 1, j, 1]
    n = np.arange(2, dtype=np.uint8)[None, :, None, None]  # [1, n, 1, 1]
    low = (qs >> (2 * j)) & 3  # [B, n, j, l]
    high = (hmask >> (4 * n + j)) & 1  # [B, n, j, l]
    return (low.astype(np.int8) - 4 * (1 - high.astype(np.int8))).reshape(-1, 256)


def _q3_k_scales(b: np.ndarray) -> np.ndarray:
    """[B, 110] -> int32 [B, 16] 6-bit scales (0..63): low 4 bits in bytes 0..7, high 2 bits in bytes 8..11."""
    words = b[:, 96:108].copy().view("<u4")  # [B, 3]
    a0, a1, top = words[:, 0], words[:, 1], words[:, 2]
    parts = [
        (a0 & _LOW4) | (((top >> 0) & _LOW2) << 4),
        (a1 & _LOW4) | (((top >> 2) & _LOW2) << 4),
        ((a0 >> 4) & _LOW4) | (((top >> 4) & _LOW2) << 4),
        ((a1 >> 4) & _LOW4) | (((top >> 6) & _LOW2) << 4),
    ]
    return np.stack(parts, axis=1).astype("<u4").view(np.uint8).reshape(-1, 16).astype(np.int32)


def _q6_k_low_high(q6: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint8 [B, 256] 6-bit weights -> (ql [B, 128], qh [B, 64]). Per half of 128: ql[l] holds weights l (low
    nibble) and l + 64 (high), ql[32 + l] weights 32 + l and 96 + l; qh[l] the high 2 bits of l, 32 + l,
    64 + l, 96 + l."""
    w = q6.reshape(-1, 2, 4, 32)  # [B, half, quarter, l]
    low, high = w & 0xF, w >> 4
    ql = np.concatenate([low[:, :, 0] | (low[:, :, 2] << 4), low[:, :, 1] | (low[:, :, 3] << 4)], axis=2)
    qh = high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)
    return ql.reshape(-1, 128), qh.reshape(-1, 64)
