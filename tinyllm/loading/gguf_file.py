"""Open a GGUF file with the `gguf` library: its metadata as plain Python values, its tensors dequantized."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import TinyLLMError

# Block formats we promise to load (dequantized to float32 at load time).
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                   "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


@dataclass
class GGUFFile:
    path: str
    metadata: dict[str, Any]
    tensors: dict[str, Any]  # name -> gguf.ReaderTensor

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def tensor_type(self, name: str) -> str:
        return self.tensors[name].tensor_type.name

    def dequantize(self, name: str) -> np.ndarray:
        """The tensor as float32, shaped like PyTorch ([out, in] for a linear weight)."""
        from gguf.quants import dequantize

        t = self.tensors[name]
        kind = t.tensor_type.name
        if kind not in SUPPORTED_TYPES:
            raise TinyLLMError(f"tensor {name!r} in {self.path} has type {kind}, "
                               f"expected one of {', '.join(SUPPORTED_TYPES)}")
        out = dequantize(t.data, t.tensor_type)
        shape = tuple(int(d) for d in reversed(t.shape))  # ggml lists the fastest dim first
        return np.ascontiguousarray(out, dtype=np.float32).reshape(shape)


def open_gguf(path: str | os.PathLike) -> GGUFFile:
    """Read a GGUF file's header; raise TinyLLMError if it is missing, not GGUF, or truncated."""
    import gguf

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TinyLLMError(f"model file {path!r} does not exist")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise TinyLLMError(f"{path!r} is not a GGUF file (it starts with {magic!r}, expected b'GGUF')")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:  # the library raises many kinds on a damaged file
        raise TinyLLMError(f"{path!r} is a damaged or truncated GGUF file ({type(exc).__name__}: {exc})") from None
    metadata = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        try:
            metadata[key] = field.contents()
        except Exception:  # a field the library cannot turn into Python values
            continue
    tensors = {t.name: t for t in reader.tensors}
    size = os.path.getsize(path)
    for t in reader.tensors:
        if int(t.data_offset) + int(t.n_bytes) > size:
            raise TinyLLMError(f"{path!r} is truncated: tensor {t.name!r} ends past the end of the file")
    return GGUFFile(path=path, metadata=metadata, tensors=tensors)
