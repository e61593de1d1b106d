"""Megatron-style sharding of a loaded model, in place: the one file that knows the model's module names.

Per decoder layer, rank r of N keeps:
  self_attn.qkv_proj   column-parallel: rows of its query heads, then of its KV heads (k, then v)
  self_attn.o_proj     row-parallel: the input columns of its query heads; output all-reduced
  mlp.gate_up_proj     column-parallel: its slice of the gate rows, then the same slice of the up rows
  mlp.down_proj        row-parallel: the same slice of the intermediate columns; output all-reduced
and sets self_attn.num_heads / num_kv_heads and mlp.intermediate_size to its local counts. With fewer KV heads
than ranks, each KV head is replicated on N / Hkv ranks (the ranks whose query heads read it). A mixture-of-experts
MLP stays whole on every rank (replicated): each rank computes the same output from the same input.

The embedding, the final norm and the head stay whole on every rank (replicated): the lookup is a gather and
costs nothing to repeat, and a replicated head gives the driver the full logits with no gather of [n, V] per
step (a vocab-parallel head would save V·C/N weights per rank for one all-gather per step; the default model
ties its head to a 49152 x 576 Q8_0 embedding, 30 MB, small beside its KV pool).

Quantized weights (QuantLinear) split only along whole blocks. Column-parallel splits output rows, and every
row holds whole blocks (blocks run along K), so it always works. Row-parallel splits K: when K / N is a
multiple of the block size (the default model: 576 / 3 = 192 and 1536 / 3 = 512 in 32-wide Q4_1 blocks) each
rank keeps its blocks as they are; otherwise (a 256-wide K-quant with K / N = 192) that rank's slice is
dequantized to a float Linear, which is exact but costs (4 / bits-per-weight) times the memory of that shard.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..errors import TinyLLMError
from ..kernels import QuantWeight
from ..model.quant_bias import BiasedQuantLinear
from ..model.quant_linear import QuantLinear


def check_shardable(config, world_size: int) -> None:
    """Refuse a model whose heads (or MLP width) do not split evenly over world_size ranks."""
    H, Hkv, N = config.num_heads, config.num_kv_heads, world_size
    if H % N:
        raise TinyLLMError(f"the model's {H} attention heads do not divide by tensor_parallel_size={N}")
    if Hkv % N and N % Hkv:
        raise TinyLLMError(
            f"the model's {Hkv} KV heads and tensor_parallel_size={N} must divide one another "
            "(KV heads are split, or replicated when there are fewer than ranks)"
        )
    if config.intermediate_size % N:
        raise TinyLLMError(
            f"the model's MLP width {config.intermediate_size} does not divide by tensor_parallel_size={N}"
        )


def local_kv_heads(num_kv_heads: int, world_size: int) -> int:
    """KV heads each rank holds: a share of them, or one replicated head when there are fewer than ranks."""
    return max(1, num_kv_heads // world_size)


def kv_head_range(rank: int, num_kv_heads: int, world_size: int) -> range:
    if num_kv_heads >= world_size:
        n = num_kv_heads // world_size
        return range(rank * n, (rank + 1) * n)
    head = rank // (world_size // num_kv_heads)  # N / Hkv ranks share each KV head
    return range(head, head + 1)


def shard_model(model: nn.Module, rank: int, world_size: int, all_reduce: Callable[[torch.Tensor], None]) -> None:
    """Replace every layer's projections by rank's shards; `all_reduce` sums a row-parallel output in place."""
    check_shardable(model.config, world_size)
    for plan, layer in zip(model.plan.layers, model.model.layers, strict=True):
        _shard_attention(layer.self_attn, rank, world_size, all_reduce)
        if plan.moe is None:
            _shard_mlp(layer.mlp, rank, world_size, all_reduce)


def _shard_attention(attn: nn.Module, rank: int, N: int, all_reduce) -> None:
    if not hasattr(attn, "qkv_proj"):
        raise TinyLLMError(f"tensor parallelism supports grouped-query attention, got {type(attn).__name__}")
    H, Hkv, D = attn.num_heads, attn.num_kv_heads, attn.head_dim
    q = range(rank * H // N, (rank + 1) * H // N)
    kv = kv_head_range(rank, Hkv, N)
    rows = [_head_rows(q, D, 0), _head_rows(kv, D, H * D), _head_rows(kv, D, (H + Hkv) * D)]
    attn.qkv_proj = column_shard(attn.qkv_proj, torch.cat(rows))
    attn.o_proj = RowParallel(row_shard(attn.o_proj, q.start * D, q.stop * D, rank), all_reduce)
    attn.num_heads, attn.num_kv_heads = len(q), len(kv)
    if hasattr(attn, "sinks"):  # one per query head
        attn.sinks = nn.Parameter(attn.sinks.detach()[q.start : q.stop].clone(), requires_grad=False)


def _shard_mlp(mlp: nn.Module, rank: int, N: int, all_reduce) -> None:
    size = mlp.intermediate_size
    start, stop = rank * size // N, (rank + 1) * size // N
    rows = torch.cat([torch.arange(start, stop), torch.arange(size + start, size + stop)])  # gate, then up
    mlp.gate_up_proj = column_shard(mlp.gate_up_proj, rows)
    mlp.down_proj = RowParallel(row_shard(mlp.down_proj, start, stop, rank), all_reduce)
    mlp.intermediate_size = stop - start


def _head_rows(heads: range, head_dim: int, offset: int) -> torch.Tensor:
    return torch.arange(offset + heads.start * head_dim, offset + heads.stop * head_dim)  # [len(heads)·D]


class RowParallel(nn.Module):
    """A row-parallel projection: this rank's partial product, summed over ranks in place."""

    def __init__(self, inner: nn.Module, all_reduce: Callable[[torch.Tensor], None]):
        super().__init__()
        self.inner, self.all_reduce = inner, all_reduce

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x).contiguous()  # [..., C] partial sum
        self.all_reduce(y)
        return y


def column_shard(linear: nn.Module, rows: torch.Tensor) -> nn.Module:
    """The output rows `rows` of a Linear or QuantLinear (whole rows, so whole quantized blocks)."""
    if isinstance(linear, QuantLinear):
        parts, offset = [], 0
        for w in linear.parts:
            mine = rows[(rows >= offset) & (rows < offset + w.shape[0])] - offset
            if mine.numel():
                parts.append(w.rows(mine))
            offset += w.shape[0]
        if getattr(linear, "bias", None) is None:
            return QuantLinear(parts)
        out = BiasedQuantLinear(parts)  # Qwen2's q/k/v: the bias rows go with their weight rows
        out.bias = nn.Parameter(linear.bias.detach()[rows].clone(), requires_grad=False)
        return out
    out = nn.Linear(linear.in_features, rows.numel(), bias=linear.bias is not None, device="meta")
    out.weight = nn.Parameter(linear.weight.detach()[rows].clone(), requires_grad=False)
    if linear.bias is not None:
        out.bias = nn.Parameter(linear.bias.detach()[rows].clone(), requires_grad=False)
    return out


def row_shard(linear: nn.Module, start: int, stop: int, rank: int) -> nn.Module:
    """Input columns [start, stop) of a Linear or QuantLinear; a bias is kept on rank 0 only, so the
    all-reduce adds it once."""
    bias = getattr(linear, "bias", None) if rank == 0 else None
    if isinstance(linear, QuantLinear):
        if all(start % w.format.block_size == 0 and stop % w.format.block_size == 0 for w in linear.parts):
            parts = [_block_columns(w, start, stop) for w in linear.parts]
            if bias is None:
                return QuantLinear(parts)
            out = BiasedQuantLinear(parts)  # gpt-oss's o_proj: the bias with rank 0's share
            out.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
            return out
        weight = linear.dequantized()[:, start:stop].contiguous()  # [N, stop - start] float32
    else:
        weight = linear.weight.detach()[:, start:stop].contiguous()  # [N, stop - start]
    out = nn.Linear(stop - start, weight.shape[0], bias=bias is not None, device="meta")
    out.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        out.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
    return out


def _block_columns(w: QuantWeight, start: int, stop: int) -> QuantWeight:
    fmt = w.format
    lo, hi = start // fmt.block_size * fmt.type_size, stop // fmt.block_size * fmt.type_size
    return QuantWeight(w.data[:, lo:hi].contiguous(), w.fmt, (w.shape[0], stop - start), w.int8_activations, w.limbs)
