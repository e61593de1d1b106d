"""What a model file says about itself without loading its weights: architecture, parameter count, context length
and tensor types, read from a GGUF header or a Hugging Face folder's config.json and safetensors headers. For
listings of models not loaded (`tinyllm list`, the server's /api/tags and /v1/models); imports no torch."""

from __future__ import annotations

import functools
import json
import os
import struct
from collections import Counter

import numpy as np

from ..errors import TinyLLMError

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
    except (OSError, ValueError, KeyError, TinyLLMError):
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
    from .gguf_reader import read_gguf

    metadata, tensors, mm = read_gguf(path)
    del mm
    arch = str(metadata.get("general.architecture", ""))
    return {
        "format": "gguf",
        "architecture": arch,
        "family": arch,  # as Ollama names a model's family: its architecture
        "parameters": sum(int(np.prod(t.shape, dtype=np.int64)) for t in tensors),
        "context_length": _int(metadata.get(f"{arch}.context_length")),
        "hidden_size": _int(metadata.get(f"{arch}.embedding_length")),
        "weight_types": dict(Counter(t.tensor_type.name for t in tensors)),
        "file_bytes": os.path.getsize(path),
        "weight_bytes": os.path.getsize(path),
    }


def _folder_summary(folder: str) -> dict:
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    text = config.get("text_config", config)  # a multimodal config holds the decoder's under text_config
    files = _weight_files(folder)
    counts, types = 0, Counter()
    for shard in files:
        for entry in _safetensors_header(shard).values():
            counts += int(np.prod(entry["shape"], dtype=np.int64))
            types[entry["dtype"]] += 1
    arch = str(config.get("model_type", ""))
    size = sum(os.path.getsize(f) for f in files)
    return {
        "format": "safetensors",
        "architecture": arch,
        "family": arch,
        "parameters": counts,
        "context_length": _int(text.get("max_position_embeddings")),
        "hidden_size": _int(text.get("hidden_size")),
        "weight_types": dict(types),
        "file_bytes": size,
        "weight_bytes": size,
    }


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _weight_files(folder: str) -> list[str]:
    single = os.path.join(folder, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    with open(os.path.join(folder, "model.safetensors.index.json"), encoding="utf-8") as f:
        shards = sorted(set(json.load(f).get("weight_map", {}).values()))
    return [os.path.join(folder, s) for s in shards]


def _safetensors_header(path: str) -> dict:
    """A safetensors file's tensor table (name -> dtype, shape, offsets), without its metadata entry."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return header
