"""The native decode step (csrc/decode.cpp): a stack of decoder layers run for N new tokens, one per sequence,
in one call. This file fills the C structures (step_ctypes.py, from the rows of step_fields.py) and makes the
call; model/native/lowering.py decides which models it serves and fills them from the model's plan and modules."""

from __future__ import annotations

import ctypes
from array import array
from dataclasses import dataclass, field, make_dataclass

import torch

from ...kernels.formats import FORMATS
from ...kernels.native import _weight_args, library, packed
from ...kernels.qweight import QuantWeight
from ...kernels.threads import kernel_threads
from .step_ctypes import QW, LayerArgs, ModelArgs, Proj, StepArgs
from .step_fields import LAYER, PROJ, Field

ACTIVATIONS = {name: i for i, name in enumerate(LAYER.field("activation").choices)}
MAX_PARTS = PROJ.field("part").count  # weights a fused projection holds
KV_TYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.int8: 3}  # csrc/kv.h KvType (int8: q8_0)

_PY_TYPES = {
    "QW": "QuantWeight | torch.Tensor",  # a tensor: float32 rows
    "Proj": "list[QuantWeight]",
    "const QW*": "list[QuantWeight]",
    "const Proj*": "list[list[QuantWeight]]",
    "int64_t": "int",
    "double": "float",
}
F32 = 0  # GGML's type id of float32 rows: a QW of a float tensor (csrc/moe.h's router reads it)


def _annotation(f: Field) -> str:
    kind = "str" if f.choices else _PY_TYPES.get(f.ctype, "torch.Tensor" if f.is_pointer else None)
    return f"{kind} | None" if f.nullable else kind


def _check_layer(self) -> None:
    for f in LAYER.fields:
        value = getattr(self, f.name)
        if value is None and not f.nullable:
            raise ValueError(f"a layer's {f.name} is required, got None")
        if f.choices and value not in f.choices:
            raise ValueError(f"a layer's {f.name} must be one of {', '.join(f.choices)}, got {value!r}")


# One layer's tensors and options as the native step reads them, a field per row of step_fields.LAYER (its
# comment there): float tensors float32 and contiguous, norm weights their effective scales ((1 + w) for
# Gemma's); a nullable field may be left out (None: the layer has none).
LayerWeights = make_dataclass(
    "LayerWeights",
    [(f.name, _annotation(f), field(default=None)) if f.nullable else (f.name, _annotation(f)) for f in LAYER.fields],
    kw_only=True,
    namespace={"__post_init__": _check_layer, "__module__": __name__},
)


@dataclass(frozen=True)
class StackShape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    rotary_dim: int
    eps: float
    kv_dtype: torch.dtype = torch.float32  # of the KV storage: a key of KV_TYPES


@dataclass
class Head:
    """The final norm and the output projection, when the native step runs them as well."""

    norm: torch.Tensor  # [C] float32: the norm's effective scale
    eps: float
    weight: QuantWeight  # [V, C]


@dataclass
class Embedding:
    """The token embeddings, when the native step looks the new tokens up itself."""

    weight: QuantWeight  # [V, C]
    scale: float | None  # each embedding times this (rounded to float32), or None


@dataclass
class StepTokens:
    """A step's tokens for the native call as flat int64 arrays: after a step has streamed the weights through
    the caches, building an array.array costs a few microseconds where a tensor costs tens."""

    ids: array  # [N]
    positions: array  # [N]
    key_rows: array  # [N]: token i reads row key_rows[i] of blocks up to its position
    blocks: array  # [R * per_row]: row r holds a sequence's blocks from position 0, 0 past its last
    per_row: int
    block_size: int
    smax: int  # positions a row covers


_NO_ROWS = array("q", [0])  # the address passed for an empty out_rows: null would mean every row


def _address(a: array, offset: int = 0) -> int:
    return a.buffer_info()[0] + offset * a.itemsize


INT8_ACTIVATIONS = 256  # or'ed into a weight's type id: decode.cpp runs it with 8-bit activations (q8act.cpp)
INT24_ACTIVATIONS = 512  # and this too: as three 8-bit limbs


def _qw(w: QuantWeight | torch.Tensor) -> QW:
    if isinstance(w, torch.Tensor):  # float32 rows [n, k], contiguous
        return QW(F32, w.data_ptr(), w.shape[1] * 4, w.shape[0], w.shape[1])
    if w.int8_activations:  # its packed form only (its blocks may be released)
        ptr, stride = packed(library(), w).data_ptr(), w.row_bytes
    else:
        _, ptr, stride = _weight_args(w)[:3]
    fmt = FORMATS[w.fmt].ggml_type
    if w.int8_activations:
        fmt |= INT8_ACTIVATIONS | (INT24_ACTIVATIONS if w.limbs == 3 else 0)
    return QW(fmt, ptr, stride, w.shape[0], w.shape[1])


def _proj(parts: list[QuantWeight]) -> Proj:
    if not 1 <= len(parts) <= MAX_PARTS:
        raise ValueError(f"a fused projection holds 1 to {MAX_PARTS} weights, got {len(parts)}")
    return Proj((QW * MAX_PARTS)(*(_qw(w) for w in parts)), len(parts))


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


_ARRAYS = {"const QW*": (QW, _qw), "const Proj*": (Proj, _proj)}  # a C array of structs: its element, packing
_STRUCTS = {"QW": (QW, _qw), "Proj": (Proj, _proj)}


def _c_value(f: Field, value, keep: list):
    """A LayerWeights value as its C field takes it (by the field's C type; None: null, 0 or a zeroed struct).
    The C arrays made go into `keep`, which must outlive the call's structs."""
    if f.ctype in _ARRAYS and value is not None:
        kind, pack = _ARRAYS[f.ctype]
        keep.append((kind * len(value))(*map(pack, value)))
        return ctypes.addressof(keep[-1])
    if f.is_pointer:
        return _ptr(value)
    if f.ctype in _STRUCTS:
        kind, pack = _STRUCTS[f.ctype]
        return kind() if value is None else pack(value)
    if value is None:
        return 0
    return f.choices.index(value) if f.choices else int(value) if isinstance(value, bool) else value


def _layer_args(w: LayerWeights, keep: list) -> LayerArgs:
    return LayerArgs(**{f.name: _c_value(f, getattr(w, f.name), keep) for f in LAYER.fields})


class DecodeStack:
    """The C structures of every layer, built once; `run` is one decode step through all of them."""

    def __init__(
        self,
        lib,
        shape: StackShape,
        layers: list[LayerWeights],
        inv_freq: list[torch.Tensor],
        head: Head | None = None,
        embedding: Embedding | None = None,
    ):
        """inv_freq: [R/2] float32 frequencies of the rotary tables (a layer's `rope` picks one); head: the final
        norm and output projection, for `head()`; embedding: for `run(..., ids=)`."""
        self.lib, self.shape = lib, shape
        self.has_head, self.embeds = head is not None, embedding is not None
        arrays: list = []  # the experts' C arrays the layers point to
        self._layers = (LayerArgs * len(layers))(*(_layer_args(w, arrays) for w in layers))
        self._keep = layers, inv_freq, head, embedding, arrays  # what the structures point into stays alive
        s = shape
        self._model = ModelArgs(
            num_layers=len(layers), hidden=s.hidden, heads=s.heads, kv_heads=s.kv_heads, head_dim=s.head_dim,
            inter=s.inter, rotary_dim=s.rotary_dim, eps=s.eps, layers=ctypes.addressof(self._layers),
            inv_freq=(ctypes.c_void_p * 2)(inv_freq[0].data_ptr(), inv_freq[-1].data_ptr()),
            kv_type=KV_TYPES[s.kv_dtype],
            final_norm=None if head is None else head.norm.data_ptr(),
            final_eps=0.0 if head is None else head.eps,
            head=QW() if head is None else _qw(head.weight),
            embed=QW(-1) if embedding is None else QW(*_weight_args(embedding.weight)[:3], *embedding.weight.shape),
            embed_scale=(embedding and embedding.scale) or 0.0,
        )  # fmt: skip
        self.vocab = 0 if head is None else head.weight.shape[0]
        self._scratch, self._x = torch.empty(0), torch.empty(0, shape.hidden)
        self.timings: torch.Tensor | None = None  # int64 [3]: ns in matmuls, attention, the rest, when set

    def run(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        write_slots: torch.Tensor,
        key_slots: torch.Tensor,
        key_rows: torch.Tensor | None = None,
        ids: torch.Tensor | None = None,
    ):
        """x [N, C] float32 embeddings -> the last layer's output [N, C] (in place). positions, write_slots [N]
        and key_slots [R, Smax] int64: token i sees the keys at key_slots[key_rows[i], :positions[i] + 1]
        (key_rows [N] int64; None: row i, R = N). With ids [N] int64 the step writes their embeddings into x
        first."""
        n, (rows, smax) = x.shape[0], key_slots.shape
        if key_rows is None and rows != n:
            raise ValueError(f"key_slots has {rows} rows for {n} tokens and no key_rows")
        ids, positions, write_slots, key_slots, key_rows = (
            None if t is None else t.contiguous() for t in (ids, positions, write_slots, key_slots, key_rows)
        )
        got = self._call(
            x.data_ptr(), n, positions.data_ptr(), write_slots.data_ptr(), key_slots.data_ptr(), _ptr(key_rows),
            smax, None, rows, 0, 0, _ptr(ids),
        )  # fmt: skip
        self._check(got, ids)
        return x

    def run_tokens(
        self,
        x: torch.Tensor,
        tokens: StepTokens,
        a: int = 0,
        b: int | None = None,
        check_rows: bool = True,
        out_rows: array | None = None,
    ) -> torch.Tensor:
        """Tokens a..b of `tokens` through the layers: x [b - a, C] float32 (contiguous; at least b - a rows
        without check_rows), their embeddings, or anything when the stack looks them up itself (`embeds`) -> the
        last layer's output, in place. With out_rows (increasing int64 rows of x below b - a) only those rows
        hold it: every token's keys and values are stored, but the last layer's attention, projection and MLP
        run for those rows alone (a prompt's other tokens are never sampled)."""
        b = len(tokens.ids) if b is None else b
        if x.shape[0] < b - a or (check_rows and x.shape[0] != b - a):
            raise ValueError(f"x has {x.shape[0]} rows for tokens {a}..{b}")
        ids = _address(tokens.ids, a) if self.embeds else None
        got = self._call(
            x.data_ptr(), b - a, _address(tokens.positions, a), None, None, _address(tokens.key_rows, a),
            tokens.smax, _address(tokens.blocks), len(tokens.blocks) // tokens.per_row, tokens.per_row,
            tokens.block_size, ids, out_rows,
        )  # fmt: skip
        if got == -3:
            raise ValueError(f"out_rows {list(out_rows)} are not increasing rows below {b - a}")
        self._check(got, tokens.ids[a:b] if ids else None)
        return x

    def logits(self, tokens: StepTokens, rows: array, group: int, every_row: bool = False) -> torch.Tensor:
        """A whole step for a stack with the embeddings and the head: tokens through the layers `group` at a
        time (into a buffer kept between steps), then the logits of rows [len(rows), V]. The last layer runs
        past the keys for those rows alone (run_tokens' out_rows), unless every_row."""
        n = len(tokens.ids)
        if self._x.shape[0] < n:
            self._x = torch.empty(n, self.shape.hidden)
        wanted = sorted(set(rows))
        for a in range(0, n, group):
            b = min(n, a + group)
            out = None if every_row else array("q", (r - a for r in wanted if a <= r < b))
            self.run_tokens(self._x[a:b] if n > group else self._x, tokens, a, b, check_rows=False, out_rows=out)
        return self.head(self._x, rows, n)

    def _call(
        self, x, n, positions, write_slots, key_slots, key_rows, smax, blocks, rows, per_row, block_size, ids, out=None
    ):
        need = self.lib.tl_decode_scratch_floats(ctypes.byref(self._model), n, smax)
        if self._scratch.numel() < need:
            self._scratch = torch.empty(need)
        step = StepArgs(
            n=n, positions=positions, write_slots=write_slots, key_slots=key_slots, key_rows=key_rows, smax=smax,
            scratch=self._scratch.data_ptr(), threads=kernel_threads(),
            timings=None if self.timings is None else self.timings.data_ptr(),
            blocks=blocks, rows=rows, blocks_per_row=per_row, block_size=block_size, ids=ids,
            out_rows=None if out is None else _address(out or _NO_ROWS), num_out=0 if out is None else len(out),
        )  # fmt: skip
        return self.lib.tl_decode_layers(ctypes.byref(self._model), ctypes.byref(step), x)

    def _check(self, got: int, ids) -> None:
        if got == -2:
            if not self.embeds:
                raise RuntimeError("this stack was built without the embeddings")
            raise IndexError(f"token ids {list(ids)} are not all below the vocabulary size")
        if got != 0:
            raise RuntimeError(f"the native decode step does not take rotary_dim={self.shape.rotary_dim}")

    def head(self, x: torch.Tensor, rows: torch.Tensor | array, n: int | None = None) -> torch.Tensor:
        """x [N, C] float32 (contiguous; its first n rows, when given), rows [k] int64 (a tensor or an array)
        -> logits [k, V] of those rows: the final norm, then the output projection."""
        n = x.shape[0] if n is None else min(n, x.shape[0])
        if not self.has_head:
            raise RuntimeError("this stack was built without the head")
        if isinstance(rows, array):
            count, address = len(rows), _address(rows)
        else:
            rows = rows.contiguous()
            count, address = rows.shape[0], rows.data_ptr()
        logits = torch.empty(count, self.vocab)
        got = self.lib.tl_decode_head(
            ctypes.byref(self._model), x.data_ptr(), n, address, count, logits.data_ptr(), kernel_threads()
        )
        if got != 0:
            raise IndexError(f"rows {list(rows)} are not all below the {n} rows of x")
        return logits
