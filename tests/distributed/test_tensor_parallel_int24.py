"""Tensor parallelism with 24-bit activations: the driver and each rank keep the blocks they pack, to cut their
shares (its own module: a process runs one tensor-parallel group at a time, and test_tensor_parallel.py's
groups live for that whole module). The bound is test_tensor_parallel.py's."""

import pytest
from test_tensor_parallel import GREEDY, SEED, prompts, recorded

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm import LLM
from tinyllm.engine.engine import Engine


@pytest.mark.slow
def test_24_bit_activations_split_over_processes(tmp_path):
    """weights="native-int24" keeps the blocks it packs when the model is to be split (each rank cuts its
    share, then packs that): the same greedy tokens as one process, logits within the bound above."""
    path = str(tmp_path / "q.gguf")
    tiny = random_tiny_llama(SEED, hidden_size=64, intermediate_size=96, num_heads=4, num_kv_heads=2, head_dim=16)
    write_gguf(tiny, path, quant_types={"weight": "Q4_1"})
    ps = prompts(3, seed=5, hi=20)
    ps = [[t % tiny.config.vocab_size for t in p] for p in ps]
    one = LLM(path, weights="native-int24")
    with LLM(path, weights="native-int24", tensor_parallel_size=2) as split:
        assert split.info()["activation_bits"] == 24
        out = {}
        for name, llm in (("one", one), ("split", split)):
            engine = Engine(llm.parts, block_size=8, num_blocks=64)
            seen = recorded(engine)
            ids = engine.add_requests(ps, GREEDY)
            while engine.has_unfinished():
                engine.step()
            out[name] = ([engine.generation(i).ids for i in ids], seen)
    assert out["one"][0] == out["split"][0]
    for a, b in zip(out["one"][1], out["split"][1]):
        assert a.shape == b.shape and (a - b).abs().max() <= 1e-5 * a.abs().max()
