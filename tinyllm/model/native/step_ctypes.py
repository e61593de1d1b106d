"""The ctypes mirror of the native step's structs, made from step_fields.py's rows, and its layout in the order
csrc/layout.cpp reports the compiled one (`tl_decode_layout`)."""

from __future__ import annotations

import ctypes

from .step_fields import STRUCTS, Field, Struct

_SCALARS = {"int64_t": ctypes.c_int64, "double": ctypes.c_double}


def _ctype(f: Field, made: dict[str, type]):
    base = ctypes.c_void_p if f.is_pointer else made.get(f.ctype) or _SCALARS[f.ctype]
    return base * f.count if f.count else base


def _make(structs: tuple[Struct, ...]) -> dict[str, type]:
    made: dict[str, type] = {}
    for s in structs:  # each uses only those before it
        made[s.name] = type(s.name, (ctypes.Structure,), {"_fields_": [(f.name, _ctype(f, made)) for f in s.fields]})
    return made


CLASSES = _make(STRUCTS)  # struct name -> its ctypes.Structure
QW, Proj, LayerArgs, ModelArgs, StepArgs = (CLASSES[s.name] for s in STRUCTS)


def layout() -> list[tuple[str, int]]:
    """(what, bytes): the size of each struct, then the offset and size of each field, in table order."""
    out = [(f"sizeof {s.name}", ctypes.sizeof(CLASSES[s.name])) for s in STRUCTS]
    for s in STRUCTS:
        for f in s.fields:
            d = getattr(CLASSES[s.name], f.name)
            out += [(f"offsetof {s.name}.{f.name}", d.offset), (f"sizeof {s.name}.{f.name}", d.size)]
    return out
