"""Load the native decode step's library (sources.py builds it, once per machine, at its first use here or at
install) and declare its entry points. It calls into the kernels' library, so it exists only beside that one:
where the kernels are not built (kernels/native.py warns why) `library()` is None too; where they are but the
decoder does not build or load, one warning says why and the model's modules run each step instead."""

from __future__ import annotations

import ctypes
import subprocess
import warnings
from pathlib import Path

from ...kernels import native
from ...kernels.build import find_compiler
from .sources import build_decoder
from .step_ctypes import layout

_I64, _PTR = ctypes.c_int64, ctypes.c_void_p

# "kernels": the kernels' library the decision was made over; "lib": the decoder's, or None once decided
_state: dict = {}


def load(path: Path) -> ctypes.CDLL:
    """The library at `path`, its entry points declared; RuntimeError where its structs' layout is not the
    ctypes mirror's."""
    lib = ctypes.CDLL(str(path))
    lib.tl_decode_layers.argtypes = [_PTR, _PTR, _PTR]
    lib.tl_decode_layers.restype = ctypes.c_int
    lib.tl_decode_head.argtypes = [_PTR, _PTR, _I64, _PTR, _I64, _PTR, _I64]
    lib.tl_decode_head.restype = ctypes.c_int
    lib.tl_decode_scratch_floats.argtypes = [_PTR, _I64, _I64]
    lib.tl_decode_scratch_floats.restype = _I64
    lib.tl_decode_layout.argtypes = [_PTR, _I64]
    lib.tl_decode_layout.restype = _I64
    lib.tl_kv_round.argtypes = [_I64, _PTR, _I64, _PTR]
    lib.tl_kv_round.restype = ctypes.c_int
    lib.tl_kv_q8.argtypes = [_PTR, _I64, _PTR, _PTR]
    lib.tl_kv_q8.restype = ctypes.c_int
    mirror, compiled = layout(), compiled_layout(lib)
    if [value for _, value in mirror] != compiled:
        wrong = next((what for (what, want), got in zip(mirror, compiled) if want != got), "the number of entries")
        raise RuntimeError(f"the compiled structs differ from their ctypes mirror at {wrong}")
    return lib


def compiled_layout(lib) -> list[int]:
    """tl_decode_layout's values: the compiler's sizes and offsets, in step_ctypes.layout()'s order."""
    count = lib.tl_decode_layout(None, 0)
    out = (ctypes.c_int64 * count)()
    lib.tl_decode_layout(out, count)
    return list(out)


def _decide(kernels: ctypes.CDLL):
    compiler = find_compiler()
    if compiler is None:
        return None, "no C++ compiler was found (set CXX or install g++)"
    try:
        return load(build_decoder(compiler, Path(kernels._name))), None
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        return None, f"building it failed: {e}"


def library() -> ctypes.CDLL | None:
    """The loaded decoder library over the kernels' current one, or None (then, the kernels being there, one
    warning per decision names the reason)."""
    kernels = native.library()
    if kernels is None:
        return None
    if _state.get("kernels") is not kernels:  # first use, or the kernels were decided again (native.reset)
        lib, reason = _decide(kernels)
        _state.update(kernels=kernels, lib=lib)
        if lib is None:
            warnings.warn(
                f"tinyllm's native decode step is not used, {reason}: each step runs the model's modules over "
                "the native kernels (correct but slower)",
                RuntimeWarning,
                stacklevel=3,
            )
    return _state["lib"]
