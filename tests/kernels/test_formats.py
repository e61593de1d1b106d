"""The block formats are described twice, across the language boundary: kernels/formats.py's table (Python's
loading, reference dequantizers and checks) and csrc/formats/list.h (every C++ switch). They must agree name for
name, type id for type id, size for size; and every other type we load is listed as what it is."""

import ctypes

import pytest

from tinyllm.kernels import build, native
from tinyllm.kernels.formats import DEQUANTIZED, FLOAT_TYPES, FORMATS, SUPPORTED_TYPES, TRANSCODED, QuantFormat
from tinyllm.loading.gguf_file import TRANSCODERS


def compiled_formats(lib) -> list[tuple[str, int, int, int]]:
    lib.tl_formats.restype = ctypes.c_char_p
    lib.tl_formats.argtypes = []
    rows = [line.split() for line in lib.tl_formats().decode().splitlines()]
    return [(name, int(i), int(block), int(size)) for name, i, block, size in rows]


def test_the_compiled_formats_are_the_python_table():
    lib = native.library()
    if lib is None:
        pytest.skip("no native kernels")
    table = [(f.name, f.ggml_type, f.block_size, f.type_size) for f in FORMATS.values()]
    assert compiled_formats(lib) == table


def test_every_format_decodes_in_a_header_of_its_own():
    headers = {p.stem for p in (build.CSRC / "formats").glob("*.h")}
    assert {name.lower() for name in FORMATS} <= headers
    listed = (build.CSRC / "formats" / "list.h").read_text()
    assert all(f'#include "{name.lower()}.h"' in listed for name in FORMATS)


def test_every_loaded_type_is_listed_once_as_what_it_is():
    assert len(SUPPORTED_TYPES) == len(set(SUPPORTED_TYPES))
    assert set(SUPPORTED_TYPES) == set(FLOAT_TYPES) | set(FORMATS) | set(TRANSCODED) | set(DEQUANTIZED)
    assert all(target in FORMATS for target in TRANSCODED.values())  # rewritten into a format a kernel runs
    assert set(TRANSCODERS) == set(TRANSCODED)


def test_a_scale_outside_its_block_is_refused_naming_it():
    mxfp4 = FORMATS["MXFP4"]
    with pytest.raises(ValueError, match=r"e8m0_offsets must lie in a block of 17 bytes, got \(17,\)"):
        QuantFormat("MXFP4", 32, 17, 39, (), mxfp4.dequantize, e8m0_offsets=(17,))
