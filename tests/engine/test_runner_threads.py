"""Steps on native kernels run torch's own ops on one thread (engine/runner.py, kernels/threads.py): every step
of the native step, and the short ones of the module path (a model the native step does not cover, whose
matmuls are native); the module path's longer steps (here a prefill) keep torch's count. The tokens do not
change."""

import pytest
import torch

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm import LLM
from tinyllm.engine import runner
from tinyllm.kernels.qmatmul import BLAS_MIN_M

QUANT_MODEL = dict(
    hidden_size=256, intermediate_size=256, num_heads=4, num_kv_heads=2, head_dim=64, max_position_embeddings=256
)


@pytest.mark.parametrize("native_step", [True, False])
def test_steps_run_torch_on_one_thread_with_equal_tokens(tmp_path, monkeypatch, native_step):
    if not native_step:
        monkeypatch.setattr(runner, "build_stack", lambda model, storage: None)
    path = str(tmp_path / "q41.gguf")
    write_gguf(random_tiny_llama(5, **QUANT_MODEL), path, quant_types={"weight": "Q4_1"})
    prompt = [(7 * i) % 250 + 3 for i in range(BLAS_MIN_M + 5)]  # one prefill chunk, on the BLAS path if module
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = LLM(path).generate(prompt, max_tokens=6, temperature=0, ignore_eos=True).ids
        torch.set_num_threads(2)
        llm = LLM(path)  # a fresh engine: no cached prefix
        seen: list[int] = []  # torch threads in each step's forward (the module path and the native step)
        forward = runner.ModelRunner.forward
        monkeypatch.setattr(
            runner.ModelRunner,
            "forward",
            lambda self, *args: (seen.append(torch.get_num_threads()), forward(self, *args))[1],
        )
        two = llm.generate(prompt, max_tokens=6, temperature=0, ignore_eos=True).ids
        assert (llm._shared.engine.runner.fused is not None) == native_step
        assert torch.get_num_threads() == 2  # restored after every step
    finally:
        torch.set_num_threads(before)
    assert two == single
    assert len(seen) == 6 and seen[0] == (1 if native_step else 2)  # the module path's prefill keeps torch's
    assert all(s == 1 for s in seen[1:])  # every decode step: torch on one thread
