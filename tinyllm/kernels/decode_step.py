"""The native decode step (csrc/decode.cpp): a stack of pre-norm decoder layers run for N new tokens, one per
sequence, in one call. This file holds the C structures and the call; model/fused_decode.py decides which
models it serves and fills them from the model's modules."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from .formats import FORMATS
from .native import _weight_args
from .qweight import QuantWeight
from .threads import kernel_threads

_I64, _F64, _FP = ctypes.c_int64, ctypes.c_double, ctypes.POINTER(ctypes.c_float)


class _QW(ctypes.Structure):
    _fields_ = [("fmt", _I64), ("data", ctypes.c_void_p), ("stride", _I64), ("n", _I64), ("k", _I64)]


class _Layer(ctypes.Structure):
    _fields_ = [
        ("attn_norm", ctypes.c_void_p),
        ("mlp_norm", ctypes.c_void_p),
        ("qkv", _QW),
        ("o", _QW),
        ("gate_up", _QW),
        ("down", _QW),
        ("qkv_bias", ctypes.c_void_p),
        ("k_cache", ctypes.c_void_p),
        ("v_cache", ctypes.c_void_p),
        ("window", _I64),
        ("rope", _I64),
    ]


class _Model(ctypes.Structure):
    _fields_ = [
        ("num_layers", _I64),
        ("hidden", _I64),
        ("heads", _I64),
        ("kv_heads", _I64),
        ("head_dim", _I64),
        ("inter", _I64),
        ("rotary_dim", _I64),
        ("eps", _F64),
        ("scale", _F64),
        ("softcap", _F64),
        ("layers", ctypes.c_void_p),
    ]


class _Step(ctypes.Structure):
    _fields_ = [
        ("n", _I64),
        ("cos", ctypes.c_void_p * 2),
        ("sin", ctypes.c_void_p * 2),
        ("write_slots", ctypes.c_void_p),
        ("key_slots", ctypes.c_void_p),
        ("lens", ctypes.c_void_p),
        ("smax", _I64),
        ("scratch", ctypes.c_void_p),
        ("threads", _I64),
    ]


@dataclass
class LayerWeights:
    """One layer's tensors, as the native step reads them (every float tensor float32 and contiguous)."""

    attn_norm: torch.Tensor  # [C]
    mlp_norm: torch.Tensor  # [C]
    qkv: QuantWeight  # [(H + 2 Hkv) D, C]
    o: QuantWeight  # [C, H D]
    gate_up: QuantWeight  # [2 I, C]
    down: QuantWeight  # [C, I]
    qkv_bias: torch.Tensor | None  # [(H + 2 Hkv) D]
    k_cache: torch.Tensor  # [slots, Hkv, D] of this layer
    v_cache: torch.Tensor
    window: int | None
    rope: int  # 0: the full layers' rotary table, 1: the sliding layers' own


@dataclass(frozen=True)
class StackShape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    rotary_dim: int
    eps: float
    scale: float
    softcap: float | None


def _qw(w: QuantWeight) -> _QW:
    _, ptr, stride = _weight_args(w)[:3]
    return _QW(FORMATS[w.fmt].ggml_type, ptr, stride, w.shape[0], w.shape[1])


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


class DecodeStack:
    """The C structures of every layer, built once; `run` is one decode step through all of them."""

    def __init__(self, lib, shape: StackShape, layers: list[LayerWeights]):
        self.lib, self.shape = lib, shape
        self._keep = layers  # the tensors the structures point into stay alive with them
        self._layers = (_Layer * len(layers))(
            *(
                _Layer(
                    _ptr(w.attn_norm),
                    _ptr(w.mlp_norm),
                    _qw(w.qkv),
                    _qw(w.o),
                    _qw(w.gate_up),
                    _qw(w.down),
                    _ptr(w.qkv_bias),
                    _ptr(w.k_cache),
                    _ptr(w.v_cache),
                    w.window or 0,
                    w.rope,
                )
                for w in layers
            )
        )
        s = shape
        self._model = _Model(
            len(layers), s.hidden, s.heads, s.kv_heads, s.head_dim, s.inter, s.rotary_dim, s.eps, s.scale,
            s.softcap or 0.0, ctypes.addressof(self._layers),
        )  # fmt: skip
        self._scratch = torch.empty(0)

    def run(
        self,
        x: torch.Tensor,
        ropes: list[tuple[torch.Tensor, torch.Tensor]],
        write_slots: torch.Tensor,
        key_slots: torch.Tensor,
        lens: torch.Tensor,
    ) -> torch.Tensor:
        """x [N, C] float32 embeddings -> the last layer's output [N, C] (in place). ropes: (cos, sin) [N, R]
        per table; write_slots [N], key_slots [N, Smax], lens [N] int64 (token i sees key_slots[i, :lens[i]])."""
        n, smax = x.shape[0], key_slots.shape[1]
        need = self.lib.tl_decode_scratch_floats(ctypes.byref(self._model), n, smax)
        if self._scratch.numel() < need:
            self._scratch = torch.empty(need)
        (cos0, sin0), (cos1, sin1) = ropes[0], ropes[-1]
        step = _Step(
            n,
            (ctypes.c_void_p * 2)(cos0.data_ptr(), cos1.data_ptr()),
            (ctypes.c_void_p * 2)(sin0.data_ptr(), sin1.data_ptr()),
            write_slots.data_ptr(),
            key_slots.data_ptr(),
            lens.data_ptr(),
            smax,
            self._scratch.data_ptr(),
            kernel_threads(),
        )
        if self.lib.tl_decode_layers(ctypes.byref(self._model), ctypes.byref(step), x.data_ptr()) != 0:
            raise RuntimeError(f"the native decode step does not take rotary_dim={self.shape.rotary_dim}")
        return x
