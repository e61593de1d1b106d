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
from ..kernels.formats import SUPPORTED_TYPES, TRANSCODED
from .gguf_reader import CutShort, GGUFTensor, attach_views, read_gguf
from .transcode import q3_k_as_q6_k

# How each block type the kernels do not run becomes blocks of the format TRANSCODED names (transcode.py)
TRANSCODERS = {"Q3_K": q3_k_as_q6_k}


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
        """A block format the kernels run (or transcode), in a 2-D tensor or a 3-D stack of experts' weights."""
        kind = self.tensor_type(name)
        return (kind in FORMATS or kind in TRANSCODED) and len(self.tensors[name].shape) in (2, 3)

    def quant_weight(self, name: str, expert: int | None = None) -> QuantWeight:
        """A 2-D block-format tensor, or one expert's [N, K] of a 3-D stack [E, N, K], as a QuantWeight whose data
        views the mmap (no copy, never written); its block table is checked: a wrong byte count or a
        NaN/infinite scale raises, naming the tensor."""
        t = self.tensors[name]
        k, n = (int(d) for d in t.shape[:2])  # ggml lists the fastest dim first
        data = t.data if expert is None else t.data[expert]
        if data.ndim != 2 or data.shape[0] != n:
            raise TinyLLMError(
                f"tensor {name!r} in {self.path} has a block table of shape {data.shape}, expected {n} rows"
            )
        kind = t.tensor_type.name
        if kind in TRANSCODED:  # a copy in a format the kernels run, of the same values
            data, kind = TRANSCODERS[kind](data), TRANSCODED[kind]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the mmap is read-only; nothing writes to it
            view = torch.from_numpy(data)  # [N, row_bytes] uint8
        try:
            w = QuantWeight(view, kind, (n, k))
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
        start = f.read(16)
    if start and b"GGUF".startswith(start[:4]) and len(start) < 4:
        raise TinyLLMError(_cut_short(path, CutShort("header", None, None)))
    if start[:4] != b"GGUF":
        raise TinyLLMError(f"{path} is not a GGUF file ({_described(start)}); expected a file that begins with GGUF")
    try:
        metadata, tensors, mm = read_gguf(path)
    except CutShort as exc:
        raise TinyLLMError(_cut_short(path, exc)) from None
    except Exception as exc:  # numpy errors and unknown types all mean a damaged header
        raise TinyLLMError(f"{path} is a damaged GGUF file: {exc}") from None
    _check_extents(path, tensors)
    attach_views(mm, tensors)
    return GGUFFile(path=path, metadata=metadata, tensors={t.name: t for t in tensors}, mapping=mm)


def _described(start: bytes) -> str:
    """What the first bytes of a file that is not GGUF are, for the error: text, bytes, or nothing."""
    if not start:
        return "it is empty"
    try:
        text = start.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.isprintable():
        return f"it starts with the text {text[:8] + '...' if len(text) > 8 else text!r}"
    return f"it starts with the bytes {start[:8].hex(' ')}"


def _cut_short(path: str, exc: CutShort) -> str:
    ends = f"the file ends at byte {os.path.getsize(path)}, inside the {exc.section}"
    if exc.num_tensors is not None:
        ends = f"its header says {exc.num_tensors} tensors and {exc.num_kv} metadata entries but {ends}"
    return f"{path} is cut short: {ends}; the download may be incomplete"


def _check_extents(path: str, tensors) -> None:
    """Each tensor's bytes, as its header's type and shape count them, end before the next tensor starts
    (a header claiming more bytes than were laid out) and before the end of the file (a truncated file)."""
    size = os.path.getsize(path)
    ordered = sorted(tensors, key=lambda t: int(t.data_offset))
    for t, after in zip(ordered, ordered[1:] + [None]):
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise TinyLLMError(
                f"{path} is cut short: tensor {t.name!r} ends at byte {end} but the file ends at byte {size}; "
                "the download may be incomplete"
            )
        if after is not None and end > int(after.data_offset):
            raise TinyLLMError(
                f"{path!r} is corrupt: tensor {t.name!r} ({t.tensor_type.name}, shape "
                f"{[int(d) for d in t.shape]}) needs {int(t.n_bytes)} bytes but only "
                f"{int(after.data_offset) - int(t.data_offset)} lie before the next tensor"
            )
