"""A GGUF header reader: metadata as plain Python values and each tensor as a numpy view of one read-only
mmap of the file (nothing is copied).

Layout (little-endian, versions 2 and 3): magic "GGUF", version u32, tensor count u64, key-value count u64;
then the key-value pairs (key string, value type u32, value); then one record per tensor (name string,
n_dims u32, dims u64 * n_dims fastest first, type u32, offset u64 from the data section); the data section
starts at the next multiple of general.alignment (32 by default). A string is a u64 length and UTF-8 bytes.
Reading ~100k vocabulary strings this way takes a fraction of a second; the `gguf` library's reader builds
a numpy view per field part and takes seconds.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

# GGUF value type id -> (struct format, numpy dtype) for scalars; 8 = string, 9 = array.
SCALARS = {
    0: ("<B", np.uint8),
    1: ("<b", np.int8),
    2: ("<H", np.uint16),
    3: ("<h", np.int16),
    4: ("<I", np.uint32),
    5: ("<i", np.int32),
    6: ("<f", np.float32),
    7: ("<?", np.bool_),
    10: ("<Q", np.uint64),
    11: ("<q", np.int64),
    12: ("<d", np.float64),
}
STRING, ARRAY = 8, 9
# Tensor types stored as plain numbers; every other type is a block table viewed as uint8 rows.
PLAIN_TYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "F64": np.float64,
    "I8": np.int8,
    "I16": np.int16,
    "I32": np.int32,
    "I64": np.int64,
}


@dataclass
class GGUFTensor:
    name: str
    tensor_type: GGMLQuantizationType
    shape: tuple[int, ...]  # ggml order: fastest dimension first
    data_offset: int  # absolute, in the file
    n_bytes: int
    data: np.ndarray | None = None  # set once the extents are checked

    def numpy_shape(self) -> tuple[int, ...]:
        """Slowest dimension first; a block table's rows are bytes."""
        dims = list(reversed(self.shape))
        if self.tensor_type.name not in PLAIN_TYPES:
            block, size = GGML_QUANT_SIZES[self.tensor_type]
            dims[-1] = dims[-1] // block * size
        return tuple(dims)


class CutShort(ValueError):
    """The file ends inside the header: in `section` ("header", "metadata" or "tensor infos"), whose counts the
    header gave (None before they were read)."""

    def __init__(self, section: str, num_tensors: int | None, num_kv: int | None):
        super().__init__(f"the file ends inside the {section}")
        self.section, self.num_tensors, self.num_kv = section, num_tensors, num_kv


class _Cursor:
    def __init__(self, buf: memoryview):
        self.buf, self.pos = buf, 0
        self.section, self.num_tensors, self.num_kv = "header", None, None

    def take(self, n: int) -> int:
        """Move past `n` bytes; CutShort if the file ends first. The position they start at."""
        if self.pos + n > len(self.buf):
            raise CutShort(self.section, self.num_tensors, self.num_kv)
        self.pos += n
        return self.pos - n

    def unpack(self, fmt: str):
        return struct.unpack_from(fmt, self.buf, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.unpack("<Q")
        at = self.take(n)
        return bytes(self.buf[at : at + n]).decode("utf-8", errors="replace")

    def value(self, kind: int):
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            return self.array()
        if kind not in SCALARS:
            raise ValueError(f"a metadata value has type id {kind}, which is no GGUF value type")
        return self.unpack(SCALARS[kind][0])

    def array(self) -> list:
        kind, count = self.unpack("<I"), self.unpack("<Q")
        if kind in SCALARS:  # numbers in one read
            dtype = np.dtype(SCALARS[kind][1]).newbyteorder("<")
            at = self.take(count * dtype.itemsize)
            return np.frombuffer(self.buf, dtype=dtype, count=count, offset=at).tolist()
        return [self.value(kind) for _ in range(count)]


def read_gguf(path: str) -> tuple[dict, list[GGUFTensor], np.memmap]:
    """(metadata, tensors with absolute offsets, the file's mmap); ValueError on a malformed header."""
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    cur = _Cursor(memoryview(mm))
    if bytes(cur.buf[:4]) != b"GGUF":
        raise ValueError("missing the GGUF magic")
    cur.pos = 4
    version, n_tensors, n_kv = cur.unpack("<I"), cur.unpack("<Q"), cur.unpack("<Q")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} is not supported (expected 2 or 3)")
    cur.section, cur.num_tensors, cur.num_kv = "metadata", n_tensors, n_kv
    metadata = {}
    for _ in range(n_kv):
        key = cur.string()
        metadata[key] = cur.value(cur.unpack("<I"))
    cur.section = "tensor infos"
    infos = []
    for _ in range(n_tensors):
        name, n_dims = cur.string(), cur.unpack("<I")
        shape = tuple(cur.unpack("<Q") for _ in range(n_dims))
        kind, offset = _tensor_type(name, cur.unpack("<I")), cur.unpack("<Q")
        infos.append((name, kind, shape, offset))
    alignment = int(metadata.get("general.alignment", 32))
    start = -(-cur.pos // alignment) * alignment
    tensors = []
    for name, kind, shape, offset in infos:
        block, size = GGML_QUANT_SIZES[kind]
        n_bytes = int(np.prod(shape, dtype=np.int64)) // block * size
        tensors.append(GGUFTensor(name, kind, shape, start + offset, n_bytes))
    return metadata, tensors, mm


def _tensor_type(name: str, type_id: int) -> GGMLQuantizationType:
    try:
        return GGMLQuantizationType(type_id)
    except ValueError:
        raise ValueError(f"tensor {name!r} has type id {type_id}, which is no GGML tensor type") from None


def attach_views(mm: np.memmap, tensors: list[GGUFTensor]) -> None:
    """Give every tensor its zero-copy view (call after checking that the extents fit the file)."""
    for t in tensors:
        dtype = PLAIN_TYPES.get(t.tensor_type.name, np.uint8)
        flat = mm[t.data_offset : t.data_offset + t.n_bytes]
        t.data = flat.view(dtype).reshape(t.numpy_shape())
