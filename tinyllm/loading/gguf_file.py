"""Open a GGUF file with the `gguf` library: its metadata as plain Python values, its tensors dequantized
or, for the block formats the kernels execute, as zero-copy views of the file's read-only mmap."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import TinyLLMError
from ..kernels import FORMATS, QuantWeight, check_blocks
from .gguf_reader import GGUFTensor, attach_views, read_gguf

# Block formats we promise to load (dequantized to float32 at load time).
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


@dataclass
class GGUFFile:
    path: str
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensor]
    mapping: np.memmap | None = None  # the whole file, read-only; the tensors' data view it

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
            raise TinyLLMError(
                f"tensor {name!r} in {self.path} has type {kind}, expected one of {', '.join(SUPPORTED_TYPES)}"
            )
        out = dequantize(t.data, t.tensor_type)
        shape = tuple(int(d) for d in reversed(t.shape))  # ggml lists the fastest dim first
        return np.ascontiguousarray(out, dtype=np.float32).reshape(shape)

    def can_stay_quantized(self, name: str) -> bool:
        return self.tensor_type(name) in FORMATS and len(self.tensors[name].shape) == 2

    def quant_weight(self, name: str) -> QuantWeight:
        """A 2-D block-format tensor as a QuantWeight whose data views the mmap (no copy, never written);
        its block table is checked: a wrong byte count or a NaN/infinite scale raises, naming the tensor."""
        t = self.tensors[name]
        k, n = (int(d) for d in t.shape)  # ggml lists the fastest dim first
        data = t.data
        if data.ndim != 2 or data.shape[0] != n:
            raise TinyLLMError(
                f"tensor {name!r} in {self.path} has a block table of shape {data.shape}, expected {n} rows"
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the mmap is read-only; nothing writes to it
            view = torch.from_numpy(data)  # [N, row_bytes] uint8
        try:
            w = QuantWeight(view, t.tensor_type.name, (n, k))
            check_blocks(w)
        except ValueError as exc:
            raise TinyLLMError(f"tensor {name!r} in {self.path} is corrupt: {exc}") from None
        return w


def open_gguf(path: str | os.PathLike) -> GGUFFile:
    """Read a GGUF file's header; raise TinyLLMError if it is missing, not GGUF, or truncated."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TinyLLMError(f"model file {path!r} does not exist")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise TinyLLMError(f"{path!r} is not a GGUF file (it starts with {magic!r}, expected b'GGUF')")
    try:
        metadata, tensors, mm = read_gguf(path)
    except Exception as exc:  # struct, numpy and unknown-enum errors all mean a damaged header
        raise TinyLLMError(f"{path!r} is a damaged or truncated GGUF file ({type(exc).__name__}: {exc})") from None
    _check_extents(path, tensors)
    attach_views(mm, tensors)
    return GGUFFile(path=path, metadata=metadata, tensors={t.name: t for t in tensors}, mapping=mm)


def _check_extents(path: str, tensors) -> None:
    """Each tensor's bytes, as its header's type and shape count them, end before the next tensor starts
    (a header claiming more bytes than were laid out) and before the end of the file (a truncated file)."""
    size = os.path.getsize(path)
    ordered = sorted(tensors, key=lambda t: int(t.data_offset))
    for t, after in zip(ordered, ordered[1:] + [None]):
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise TinyLLMError(f"{path!r} is truncated: tensor {t.name!r} ends past the end of the file")
        if after is not None and end > int(after.data_offset):
            raise TinyLLMError(
                f"{path!r} is corrupt: tensor {t.name!r} ({t.tensor_type.name}, shape "
                f"{[int(d) for d in t.shape]}) needs {int(t.n_bytes)} bytes but only "
                f"{int(after.data_offset) - int(t.data_offset)} lie before the next tensor"
            )
