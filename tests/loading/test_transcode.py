"""Q3_K blocks rewritten as Q6_K hold the same values bit for bit: random blocks (every scale and weight bit
pattern), negative and tiny scales, dequantized by the gguf library for both formats and by our Q6_K kernel."""

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize

from tinyllm.kernels import QuantWeight
from tinyllm.kernels import dequantize as our_dequantize
from tinyllm.loading.transcode import q3_k_as_q6_k

Q3_K, Q6_K = gguf.GGMLQuantizationType.Q3_K, gguf.GGMLQuantizationType.Q6_K


@pytest.mark.parametrize("d", [0.013, -2.5, 6e-8, 0.0])
def test_q3_k_as_q6_k_dequantizes_to_the_same_bits(d):
    rows, blocks = 6, 3
    raw = np.random.default_rng(7).integers(0, 256, size=(rows, blocks, 110), dtype=np.uint8)
    raw[..., 108:110] = np.frombuffer(np.float16(d).tobytes(), dtype=np.uint8)
    q3 = raw.reshape(rows, blocks * 110)
    q6 = q3_k_as_q6_k(q3)
    assert q6.shape == (rows, blocks * 210)
    expected = dequantize(q3, Q3_K)  # [rows, blocks * 256]
    assert np.array_equal(dequantize(q6, Q6_K).view(np.uint32), expected.view(np.uint32))
    ours = our_dequantize(QuantWeight(torch.from_numpy(q6), "Q6_K", (rows, blocks * 256)))
    assert torch.equal(ours, torch.from_numpy(expected))
