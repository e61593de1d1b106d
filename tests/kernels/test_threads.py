"""torch_single_threaded: torch on one thread inside, the native kernels on torch's count from before."""

import torch

from helpers.quant_blocks import weight
from tinyllm.kernels import kernel_threads, qmatmul, torch_single_threaded


def test_scope_moves_torch_to_one_thread_and_keeps_the_kernels_count():
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        assert kernel_threads() == 3
        with torch_single_threaded():
            assert torch.get_num_threads() == 1 and kernel_threads() == 3
            with torch_single_threaded():  # nested: the outer count stays
                assert torch.get_num_threads() == 1 and kernel_threads() == 3
            assert torch.get_num_threads() == 1 and kernel_threads() == 3
        assert torch.get_num_threads() == 3 and kernel_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_scope_restores_after_an_error():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        try:
            with torch_single_threaded():
                raise KeyError("inside")
        except KeyError:
            pass
        assert torch.get_num_threads() == 2 and kernel_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_kernels_inside_the_scope_give_the_same_result():
    """Each output row is one thread's whole dot product, so the thread count cannot change a value."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        w = weight("Q4_1", 203, 96, seed=4)
        for m in (1, 5, 40):
            x = torch.randn(m, 96)
            outside = qmatmul(x, w)
            with torch_single_threaded():
                inside = qmatmul(x, w)
            assert torch.equal(inside, outside)
    finally:
        torch.set_num_threads(before)
