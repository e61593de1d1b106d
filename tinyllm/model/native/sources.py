"""The native decode step's library: csrc's units over the kernels' headers, with the structs of step_fields.py
written beside them as step_args.h, linked against the kernels' library (whose thread pool and matmuls it
calls). Plain Python, no torch: the install builds it too (setup.py)."""

from __future__ import annotations

from pathlib import Path

from ...kernels import build
from . import step_fields

FOLDER = Path(__file__).parent / "csrc"
HEADERS = ("attention.h", "decode_args.h", "kv.h", "kv16.h", "layer_ops.h", "moe.h")
UNITS = ("decode.cpp", "layout.cpp")
LIB_NAME = "libtinyllm_decoder.so"
NOTICE = "tinyllm: building the native decode step for this machine, once (seconds to a minute):"


def decoder_sources(kernels: Path) -> build.Sources:
    """The decoder's sources, linked against the kernels' library at `kernels`."""
    generated = ((step_fields.HEADER_NAME, step_fields.header()),)
    return build.Sources(LIB_NAME, FOLDER, HEADERS, UNITS, NOTICE, (build.CSRC,), generated, (kernels,))


def build_decoder(compiler: str, kernels: Path, log=None) -> Path:
    """The cached decoder library over the kernels' library at `kernels`, compiled first if absent."""
    return build.build(compiler, decoder_sources(kernels), log)
