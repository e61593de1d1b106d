"""Floors that no engine can go below on the same machine, for the benchmarks to report beside their figures.

The float32 floor of a serving run: the multiply-adds its requests need at the least, and the time they take
at the cores' measured FMA rate. Every float32 engine does one FMA per multiply-add, so no such engine can run
the requests in less time on the same cores, whatever its kernels; a run's wall time over the floor says how
much of the machine it used.

What a run needs at the least, per request of p prompt tokens (c of them from the prefix cache) and o output
tokens:
- the layers' linear maps for its p - c uncached prompt tokens and o - 1 output tokens (the last output token
  is never fed back); of the last layer, only the key and value projections for prompt tokens no one reads;
- the head once per output token;
- attention: each fed token's query against the keys it sees (its position + 1, or the layer's window), one
  multiply-add per key and head dimension for the scores and one for the weighted values (in the last layer,
  only for the rows read).
Memory traffic is not counted (the cores could in principle overlap it), so the floor is a bound, not an
estimate: a real run also waits for weights and the KV cache.

The memory floor of batch-1 decode: each step reads every weight of the layers and the head as stored
(quantized blocks or floats) and the keys and values its query sees, so a sequence's decode steps take at least
those bytes over the machine's measured read rate. In a mixture of experts a token reads (and multiplies by) its
top_k experts of each layer, not the others: both floors count those alone."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Costs:
    """Multiply-adds per token of one model: the layers' linear maps, the last layer's key and value
    projections, the head; and per (query, key) pair of each layer."""

    layers: int
    last_layer: int
    last_layer_kv: int
    head: int
    per_key: int
    windows: tuple[int | None, ...]


def _linear_macs(module) -> int:
    return sum(m.in_features * m.out_features for m in module.modules() if hasattr(m, "in_features"))


def _idle_experts(layers, count) -> int:
    """count(experts) for the experts one token skips: (E - k) / E of each mixture of experts' (they are alike)."""
    from ..model.moe import MoEMLP

    moe = [layer.mlp for layer in layers if isinstance(layer.mlp, MoEMLP)]
    return sum(count(m.experts) * (m.plan.num_experts - m.plan.top_k) // m.plan.num_experts for m in moe)


def _active_macs(layers) -> int:
    return _linear_macs(layers) - _idle_experts(layers, _linear_macs)


def costs(model) -> Costs | None:
    """The model's Costs, or None for a model this count does not cover (any but LlamaForCausalLM's families
    with grouped-query attention)."""
    from ..model.attention import GQAttention  # here, so that `bench decode --help` imports no torch
    from ..model.llama import LlamaForCausalLM

    if not isinstance(model, LlamaForCausalLM):
        return None
    layers = model.model.layers
    attn = [getattr(layer, "self_attn", None) for layer in layers]
    if not all(isinstance(a, GQAttention) for a in attn):
        return None
    c = model.config
    kv = attn[-1].qkv_proj.in_features * 2 * c.num_kv_heads * c.head_dim
    return Costs(
        layers=_active_macs(layers),
        last_layer=_active_macs(layers[-1:]),
        last_layer_kv=kv,
        head=model.lm_head.in_features * model.lm_head.out_features,
        per_key=2 * c.num_heads * c.head_dim,
        windows=tuple(layer.window for layer in model.plan.layers),
    )


def _keys_seen(first: int, last: int, window: int | None) -> int:
    """Sum over positions first..last - 1 of the keys a query there sees: position + 1, at most window."""
    if last <= first:
        return 0
    if window is None:
        return (last * (last + 1) - first * (first + 1)) // 2
    cut = min(max(window, first), last)  # positions below cut see position + 1 keys, the rest window
    return (cut * (cut + 1) - first * (first + 1)) // 2 + (last - cut) * window


def request_macs(c: Costs, prompt: int, output: int, cached: int = 0) -> int:
    """The least multiply-adds of one request (module docstring)."""
    if not 0 <= cached <= prompt or output < 0:
        raise ValueError(f"request of {prompt} prompt tokens ({cached} cached) and {output} output tokens")
    if output == 0:
        return 0
    fed = prompt + output - 1  # positions 0 .. fed - 1 go through the layers; the first `cached` were done before
    unread = prompt - 1 - cached if prompt > cached else 0  # uncached prompt rows whose logits no one reads
    linear = (fed - cached) * c.layers - unread * (c.last_layer - c.last_layer_kv)
    *full, last = c.windows  # the last layer attends from the rows read alone
    attention = sum(c.per_key * _keys_seen(cached, fed, w) for w in full)
    attention += c.per_key * _keys_seen(max(cached, prompt - 1), fed, last)
    return linear + output * c.head + attention


def floor(model, requests: list[tuple[int, int, int]], gmacs: float | None) -> dict | None:
    """The float32 floor of requests [(prompt, output, cached), ...] at gmacs G multiply-adds a second; None
    where costs() does not cover the model or no FMA rate was measured."""
    c = costs(model)
    if c is None or not gmacs:
        return None
    macs = sum(request_macs(c, p, o, k) for p, o, k in requests)
    return {"float32_gmacs": macs / 1e9, "fma_gmacs_per_s": gmacs, "float32_floor_s": macs / 1e9 / gmacs}


def _stored_bytes(module) -> int:
    """Bytes of the module's weights as stored: quantized blocks and float parameters."""
    from ..model.quant_linear import QuantLinear

    quant = sum(w.data.nbytes for m in module.modules() if isinstance(m, QuantLinear) for w in m.parts)
    return quant + sum(p.nbytes for p in module.parameters())


def decode_bytes(model, kv_itemsize: float, prompt: int, new: int) -> tuple[int, int] | None:
    """(weight bytes one decode step reads, key and value bytes all the decode steps of one sequence read) for
    `new` tokens after a prompt of `prompt`: steps at positions prompt .. prompt + new - 2 (the first new token
    comes from the prefill); None where costs() does not cover the model."""
    c = costs(model)
    if c is None:
        return None
    layers = model.model.layers
    weights = _stored_bytes(layers) - _idle_experts(layers, _stored_bytes)  # a token's experts alone
    weights += _stored_bytes(model.lm_head) + _stored_bytes(model.model.norm)
    per_key = 2 * model.config.num_kv_heads * model.config.head_dim * kv_itemsize  # a key and its value
    kv = sum(per_key * _keys_seen(prompt, prompt + new - 1, w) for w in c.windows)
    return weights, kv


def memory_floor(model, kv_itemsize: float, prompt: int, new: int, gbytes: float | None) -> dict | None:
    """The memory floor of one sequence's decode steps at gbytes GB a second (module docstring)."""
    counted = decode_bytes(model, kv_itemsize, prompt, new)
    if counted is None or not gbytes or new < 2:
        return None
    weights, kv = counted
    seconds = ((new - 1) * weights + kv) / 1e9 / gbytes
    return {
        "weight_mb_per_step": weights / 1e6,
        "kv_mb_per_step": kv / (new - 1) / 1e6,
        "read_gb_per_s": gbytes,
        "floor_s": seconds,
        "most_tokens_per_s": (new - 1) / seconds,
    }
