"""Load the C++ kernels' shared library with ctypes and call it. `pip install` builds the library for the
installing machine (setup.py, with `build.py`); where that did not happen, or the machine, compiler or sources
changed since, the first use builds it and says so on stderr while it compiles.

The library is plain C++ without torch headers with its own small thread pool. Without a compiler, after a
failed build, or with TINYLLM_NATIVE=0, `library()` is None and one warning says why. x86 with AVX2 takes the
AVX2 (and AVX-512) kernels, 64-bit ARM the NEON ones, anything else the portable C++ (TINYLLM_NATIVE=scalar
and =avx2 force the lesser paths; see build.py).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import warnings
from pathlib import Path

import torch

from .build import KERNELS, LIB_NAME, build, cache_root, cpu_features, find_compiler, flags
from .formats import FORMATS
from .qweight import QuantWeight
from .threads import kernel_threads

__all__ = ["LIB_NAME", "cache_root", "cpu_features", "find_compiler", "flags", "library", "reset"]
_I64, _PTR = ctypes.c_int64, ctypes.c_void_p

_state: dict = {}  # "lib": the loaded library or None once decided; the process-wide cache of the build


def load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.tl_qmatmul.argtypes = [ctypes.c_int, _PTR, _I64, _I64, _PTR, _I64, _I64, _PTR, ctypes.c_int]
    lib.tl_dequantize.argtypes = [ctypes.c_int, _PTR, _I64, _I64, _I64, _PTR, ctypes.c_int]
    lib.tl_qmatmul_q8.argtypes = [ctypes.c_int, _PTR, _I64, _I64, _PTR, _I64, _PTR, ctypes.c_int, _I64]
    lib.tl_qmatmul_asking.argtypes = lib.tl_qmatmul.argtypes + [_PTR, _I64, ctypes.c_double]
    lib.tl_qmatmul_asking.restype = ctypes.c_int
    lib.tl_q8_packed_bytes.argtypes = [ctypes.c_int, _I64, _I64]
    lib.tl_q8_packed_bytes.restype = _I64
    lib.tl_q8_pack.argtypes = [ctypes.c_int, _PTR, _I64, _I64, _I64, _PTR, ctypes.c_int]
    lib.tl_q8_pack.restype = ctypes.c_int
    lib.tl_qmatmul.restype = lib.tl_dequantize.restype = lib.tl_simd.restype = ctypes.c_int
    lib.tl_qmatmul_q8.restype = lib.tl_q8_supported.restype = ctypes.c_int
    lib.tl_q8_supported.argtypes = [ctypes.c_int]
    lib.tl_q8_vnni512.argtypes = []
    lib.tl_q8_vnni512.restype = ctypes.c_int
    lib.tl_quantize_q8.argtypes = [_PTR, _I64, _I64, _I64, _PTR, _PTR, _PTR]
    lib.tl_quantize_q8.restype = None
    lib.tl_greedy_rows.argtypes = [_PTR, _I64, _I64, _PTR, _PTR, _PTR, ctypes.c_int]
    lib.tl_greedy_rows.restype = _I64
    lib.tl_fma_rate.argtypes = [ctypes.c_int, ctypes.c_double]
    lib.tl_fma_rate.restype = ctypes.c_double
    lib.tl_fma_lanes.argtypes = []
    lib.tl_fma_lanes.restype = ctypes.c_int
    return lib


def _decide():
    if os.environ.get("TINYLLM_NATIVE", "1") == "0":
        return None, "TINYLLM_NATIVE=0 is set"
    compiler = find_compiler()
    if compiler is None:
        return None, "no C++ compiler was found (set CXX or install g++)"
    try:
        return load(build(compiler, KERNELS)), None
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        return None, f"building them failed: {e}"


def library() -> ctypes.CDLL | None:
    """The loaded kernel library, or None (then one warning per process names the reason)."""
    if "lib" not in _state:
        lib, reason = _decide()
        _state["lib"] = lib
        if lib is None:
            warnings.warn(
                f"tinyllm native quantized kernels are not used, {reason}: falling back to "
                "dequantize + F.linear (correct but slower)",
                RuntimeWarning,
                stacklevel=3,
            )
    return _state["lib"]


def reset() -> None:
    """Forget the decision so the next `library()` decides again (tests of the fallback use it)."""
    _state.clear()


def _weight_args(w: QuantWeight) -> tuple:
    """(type id, data pointer, row stride) of the weight, kept on it: a decode step calls this ~200 times."""
    args = w.__dict__.get("_native_args")
    if args is None or args[3] is not w.data:
        if w.data.is_meta:
            raise ValueError(f"this {w.fmt} weight {w.shape} runs on its packed form only: its blocks were released")
        data = w.data if w.data.stride(1) == 1 else w.data.contiguous()
        args = (FORMATS[w.fmt].ggml_type, data.data_ptr(), data.stride(0), w.data, data)
        w.__dict__["_native_args"] = args
    return args


def packed(lib, w: QuantWeight) -> torch.Tensor:
    """The weight rewritten for the 8-bit-activation kernel (csrc/q8act.h: rows in groups of 16, codes
    interleaved so that a vector lane is one output), made at the first call and kept on the weight."""
    got = w.__dict__.get("_q8_packed")
    if got is None or got[0] is not w.data:
        fmt_id, ptr, stride = _weight_args(w)[:3]  # refuses released blocks
        n, k = w.shape
        out = torch.empty(lib.tl_q8_packed_bytes(fmt_id, n, k), dtype=torch.uint8)
        if lib.tl_q8_pack(fmt_id, ptr, n, k, stride, out.data_ptr(), kernel_threads()) != 0:
            raise ValueError(f"no 8-bit-activation kernel for {w.fmt}")
        got = w.__dict__["_q8_packed"] = (w.data, out)
    return got[1]


def release_blocks(lib, w: QuantWeight) -> None:
    """Packs a weight with integer activations, then drops its blocks (a copy made at load for fused or
    reordered rows, or a view of the file mapping whose pages the loader then gives back): its matmuls read only
    the packed form. `data` becomes a meta tensor of the same shape, so anything that would read the blocks
    again (a repack, a row lookup, a shard) fails loudly."""
    if w.data.is_meta and "_q8_packed" in w.__dict__:
        return  # packed from its parts (`pack_parts`): it never had blocks of its own
    out = packed(lib, w)
    w.data = torch.empty(w.data.shape, dtype=torch.uint8, device="meta")
    w.__dict__["_q8_packed"] = (w.data, out)
    w.__dict__.pop("_native_args", None)


PACK_GROUP = 16  # weight rows per packed group (csrc/q8act.h)


def pack_parts(lib, parts: list[QuantWeight]) -> QuantWeight | None:
    """Parts of one format and width stacked by rows (a fused projection), packed straight into the
    integer-activation kernels' layout with no stacked copy of their blocks, which are not kept: the packed
    rows go in groups of 16, so where every part but the last fills whole groups the stack's packed form is
    the parts' packed forms one after another. None where that does not hold, or the format has no packed
    form (the caller stacks the blocks then)."""
    fmt, k = parts[0].format, parts[0].shape[1]
    n = sum(p.shape[0] for p in parts)
    sizes = [lib.tl_q8_packed_bytes(fmt.ggml_type, p.shape[0], k) for p in parts]
    total = lib.tl_q8_packed_bytes(fmt.ggml_type, n, k)
    if total < 0 or any(p.shape[0] % PACK_GROUP for p in parts[:-1]) or sum(sizes) != total:
        return None
    out = torch.empty(total, dtype=torch.uint8)
    at = out.data_ptr()
    for p, size in zip(parts, sizes):
        fmt_id, ptr, stride = _weight_args(p)[:3]
        lib.tl_q8_pack(fmt_id, ptr, p.shape[0], k, stride, at, kernel_threads())
        at += size
    w = QuantWeight(torch.empty((n, parts[0].row_bytes), dtype=torch.uint8, device="meta"), parts[0].fmt, (n, k))
    w.__dict__["_q8_packed"] = (w.data, out)
    return w


def matmul_into(lib, x: torch.Tensor, m: int, w: QuantWeight, y: torch.Tensor) -> None:
    """y [M, N] = x [M, K] @ W^T; x and y float32 and contiguous (x quantized to 8-bit limbs first where the
    weight says int8_activations)."""
    n, k = w.shape
    if w.int8_activations:
        data = packed(lib, w).data_ptr()
        lib.tl_qmatmul_q8(w.format.ggml_type, x.data_ptr(), m, k, data, n, y.data_ptr(), kernel_threads(), w.limbs)
        return
    fmt_id, ptr, stride = _weight_args(w)[:3]
    lib.tl_qmatmul(fmt_id, x.data_ptr(), m, k, ptr, n, stride, y.data_ptr(), kernel_threads())


def quantize_activations(lib, x: torch.Tensor, limbs: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The native kernels' 8-bit quantization of x [M, K] (float32, contiguous) as `limbs` rows a row: q [M * L,
    K], d and sum [M * L, K/32], limb l of row i at row i * L + l."""
    m, k = x.shape
    q = torch.empty(m * limbs, k, dtype=torch.int8)
    d = torch.empty(m * limbs, k // 32)
    total = torch.empty(m * limbs, k // 32, dtype=torch.int32)
    lib.tl_quantize_q8(x.data_ptr(), m, k, limbs, q.data_ptr(), d.data_ptr(), total.data_ptr())
    return q, d, total


def dequantize_rows(lib, w: QuantWeight, n0: int, n1: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rows n0..n1 of the weight as float32 [n1 - n0, K], decoded by the native kernels."""
    fmt_id, ptr, stride = _weight_args(w)[:3]
    k = w.shape[1]
    out = torch.empty(n1 - n0, k, dtype=torch.float32) if out is None else out  # [R, K]
    lib.tl_dequantize(fmt_id, ptr + n0 * stride, n1 - n0, k, stride, out.data_ptr(), kernel_threads())
    return out
