"""Lines asked for during a matmul (kernels/csrc/ahead.h: the next layer's keys and values, fetched while the
matmul computes) change no value: every float32 kernel path gives the same bits with asks as without, however
many lines it is asked to fetch and whether they run out mid-matmul."""

import pytest
import torch

from helpers.quant_blocks import weight
from tinyllm.kernels import FORMATS, native
from tinyllm.kernels.threads import kernel_threads

# 2, 5: a few rows (pair kernels); 8, 13: the tile, its remainder; 16, 32: whole tiles, lines asked for among
# their FMAs; 300: panels of decoded strips
ROWS = [2, 5, 8, 13, 16, 32, 300]
# lines a multiply-add: none asked; the region runs out early; about what a decode step asks
RATES = [0.0, 1.0, 1e-3]


def region(mb: int = 4) -> torch.Tensor:
    return torch.zeros(mb << 20, dtype=torch.uint8)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_asking_ahead_changes_no_float32_result(path, fmt):
    if path == "fallback":
        pytest.skip("the PyTorch form asks for nothing")
    lib = native.library()
    n, k = 200, 512
    w = weight(fmt, n, k, seed=3)
    fmt_id, ptr, stride = native._weight_args(w)[:3]
    mem = region()
    for m in ROWS:
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
        plain = torch.empty(m, n)
        assert lib.tl_qmatmul(fmt_id, x.data_ptr(), m, k, ptr, n, stride, plain.data_ptr(), kernel_threads()) == 0
        for rate in RATES:
            asked = torch.full((m, n), float("nan"))
            args = (fmt_id, x.data_ptr(), m, k, ptr, n, stride, asked.data_ptr(), kernel_threads())
            assert lib.tl_qmatmul_asking(*args, mem.data_ptr(), mem.numel(), rate) == 0
            assert torch.equal(asked, plain), (m, rate)
