"""Sharding (distributed/shard.py) without processes: N shards of one model run in N threads whose all-reduce
is a sum in rank order, and rank 0's logits equal the whole model's; head counts and refusals.

Bound as in test_quant_linear: partial sums change only the order of float32 additions; 1e-5 of the largest
logit leaves nothing for a wrong head, row, block or column."""

import threading

import pytest
import torch

from helpers.family_models import FAMILY_NAMES, hf_model, write_family_gguf
from helpers.model_files import random_tiny_llama, write_gguf
from helpers.tiny_models import tiny_config, tiny_llama
from tinyllm.distributed.shard import check_shardable, kv_head_range, local_kv_heads, shard_model
from tinyllm.errors import TinyLLMError
from tinyllm.loading.loader import load
from tinyllm.model.quant_linear import QuantLinear

IDS = torch.tensor([[5, 80, 200, 7, 33, 150, 9, 260, 1, 44]])
QUANT_MODEL = dict(hidden_size=256, intermediate_size=256, num_heads=4, num_kv_heads=2, head_dim=64)


class ThreadSum:
    """All-reduce for ranks that are threads of one process: every rank gets the sum in rank order."""

    def __init__(self, n: int):
        self.barrier, self.parts = threading.Barrier(n), [None] * n

    def for_rank(self, rank: int):
        def all_reduce(y: torch.Tensor) -> None:
            self.parts[rank] = y.clone()
            self.barrier.wait()
            total = sum(self.parts[1:], self.parts[0].clone())
            self.barrier.wait()  # everyone has read the parts before the next call overwrites them
            y.copy_(total)

        return all_reduce


def sharded_logits(models: list, n: int, ids: torch.Tensor = IDS) -> torch.Tensor:
    reduce, out = ThreadSum(n), [None] * n
    for rank, model in enumerate(models):
        shard_model(model, rank, n, reduce.for_rank(rank))

    def run(rank):
        with torch.inference_mode():
            out[rank] = models[rank](ids)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(out[0], o) for o in out[1:])  # every rank computes the same hidden states
    return out[0]


def assert_close(a, b):
    assert (a - b).abs().max() <= 1e-5 * b.abs().max()


@pytest.mark.parametrize("n", [2, 4])
def test_float_shards_sum_to_the_whole_model(n):
    whole = tiny_llama(3, vocab_size=300)
    with torch.inference_mode():
        want = whole(IDS)
    assert_close(sharded_logits([tiny_llama(3, vocab_size=300) for _ in range(n)], n), want)


@pytest.mark.parametrize("kind, whole_blocks", [("Q4_1", True), ("Q4_K", False)])
@pytest.mark.parametrize("n", [2, 4])
def test_quantized_shards_keep_whole_blocks_or_dequantize(tmp_path, kind, whole_blocks, n):
    path = str(tmp_path / f"{kind}.gguf")
    write_gguf(random_tiny_llama(2, **QUANT_MODEL), path, quant_types={"weight": kind})
    with torch.inference_mode():
        want = load(path, weights="native").model(IDS)
    models = [load(path, weights="native").model for _ in range(n)]
    got = sharded_logits(models, n)
    assert_close(got, want)
    mlp = models[0].model.layers[0].mlp
    assert isinstance(mlp.gate_up_proj, QuantLinear)  # output rows: always whole blocks
    assert mlp.gate_up_proj.out_features == 2 * 256 // n
    # 256 / n input columns: whole 32-wide Q4_1 blocks; not whole 256-wide Q4_K blocks, so float
    assert isinstance(mlp.down_proj.inner, QuantLinear) == whole_blocks
    assert mlp.down_proj.inner.in_features == 256 // n


def test_kv_heads_split_or_replicate():
    assert [kv_head_range(r, 4, 2) for r in range(2)] == [range(0, 2), range(2, 4)]
    assert [kv_head_range(r, 2, 4) for r in range(4)] == [range(0, 1), range(0, 1), range(1, 2), range(1, 2)]
    assert local_kv_heads(3, 3) == 1 and local_kv_heads(2, 4) == 1 and local_kv_heads(8, 2) == 4


def test_counts_that_do_not_divide_are_refused_naming_both_numbers():
    with pytest.raises(TinyLLMError, match="9 attention heads do not divide by tensor_parallel_size=2"):
        check_shardable(tiny_config(num_heads=9, num_kv_heads=3), 2)
    with pytest.raises(TinyLLMError, match="6 KV heads and tensor_parallel_size=4"):
        check_shardable(tiny_config(num_heads=12, num_kv_heads=6), 4)
    with pytest.raises(TinyLLMError, match="MLP width 100 does not divide by tensor_parallel_size=8"):
        check_shardable(tiny_config(num_heads=8, num_kv_heads=8, intermediate_size=100), 8)
    check_shardable(tiny_config(num_heads=9, num_kv_heads=3, intermediate_size=192), 3)


@pytest.mark.parametrize("quant", [None, "Q8_0"])
@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.slow
def test_every_family_shards_to_the_whole_model(tmp_path, family, quant):
    """Biases (Qwen2), q/k norms (Qwen3, Gemma 3), windows, soft-caps and sandwich norms survive the split."""
    model = hf_model(family)
    path = write_family_gguf(model, family, str(tmp_path / f"{family}.gguf"), quant=quant)
    with torch.inference_mode():
        want = load(path, weights="native").model(IDS[:, :8])
    models = [load(path, weights="native").model for _ in range(2)]
    assert_close(sharded_logits(models, 2, IDS[:, :8]), want)
