"""What a model file says about itself without loading its weights: architecture, family, parameter count,
context length and tensor types, read from a GGUF header or a Hugging Face folder's config.json and safetensors
headers. For listings of models not loaded (`tinyllm list`, the server's /api/tags and /v1/models)."""

from __future__ import annotations

import functools
import json
import os
import struct
from collections import Counter

import numpy as np

from ..errors import TinyLLMError
from .hf_model import _weight_files

_DTYPE_NAMES = {"F32": "F32", "F16": "F16", "BF16": "BF16"}
UNREADABLE = {
    "format": "unknown",
    "family": "unknown",
    "architecture": "unknown",
    "parameters": 0,
    "context_length": None,
    "hidden_size": None,
    "weight_types": {},
    "file_bytes": 0,
    "weight_bytes": 0,
}


def summary_of(path: str) -> dict:
    """file_summary, read once per version of the file (path, size, mtime); for a file that cannot be read
    (gone, or not a model) a summary that says so, for listings that must not fail on one bad entry."""
    try:
        stat = os.stat(path)
        size = stat.st_size if os.path.isfile(path) else 0
        return _summary(path, size, stat.st_mtime_ns)
    except (OSError, ValueError, TinyLLMError):
        return dict(UNREADABLE)


@functools.lru_cache(maxsize=256)
def _summary(path: str, size: int, mtime_ns: int) -> dict:
    return file_summary(path)


def file_summary(path: str) -> dict:
    """{format, architecture, family, parameters, context_length, hidden_size, weight_types, file_bytes};
    ValueError or TinyLLMError for a file that is not a model tinyllm reads."""
    if os.path.isdir(path):
        return _folder_summary(path)
    return _gguf_summary(path)


def _gguf_summary(path: str) -> dict:
    from ..model.family import family_for_gguf
    from .gguf_reader import read_gguf

    metadata, tensors, mm = read_gguf(path)
    del mm
    arch = str(metadata.get("general.architecture", ""))
    return {
        "format": "gguf",
        "architecture": arch,
        "family": family_for_gguf(arch).name,
        "parameters": sum(int(np.prod(t.shape, dtype=np.int64)) for t in tensors),
        "context_length": int(metadata.get(f"{arch}.context_length", 0)) or None,
        "hidden_size": int(metadata.get(f"{arch}.embedding_length", 0)) or None,
        "weight_types": dict(Counter(t.tensor_type.name for t in tensors)),
        "file_bytes": os.path.getsize(path),
        "weight_bytes": os.path.getsize(path),
    }


def _folder_summary(folder: str) -> dict:
    from .hf_config import config_from_hf

    config = config_from_hf(folder)
    files = _weight_files(folder)
    counts, types = 0, Counter()
    for shard in files:
        for entry in _safetensors_header(shard).values():
            counts += int(np.prod(entry["shape"], dtype=np.int64))
            types[_DTYPE_NAMES.get(entry["dtype"], entry["dtype"])] += 1
    return {
        "format": "safetensors",
        "architecture": config.architecture,
        "family": config.family,
        "parameters": counts,
        "context_length": config.context_length,
        "hidden_size": config.hidden_size,
        "weight_types": dict(types),
        "file_bytes": sum(os.path.getsize(f) for f in files),
        "weight_bytes": sum(os.path.getsize(f) for f in files),
    }


def _safetensors_header(path: str) -> dict:
    """A safetensors file's tensor table (name -> dtype, shape, offsets), without its metadata entry."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return header
