"""A model's digest, as Ollama's clients show it ("sha256:..."): the SHA-256 of its GGUF file, or of a folder's
files (each file's name and digest, in name order). Computed once per file version (path, size, modification
time) and kept for the process: hashing reads the whole file, seconds for gigabytes."""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache

_CHUNK = 1 << 20


def model_digest(path: str) -> str | None:
    """ "sha256:<hex>" of the file or folder at path; None when there is no such path (a model built in memory)."""
    if not path or not os.path.exists(path):
        return None
    return f"sha256:{_digest(os.path.realpath(path), _version(path))}"


def _version(path: str) -> tuple:
    """What tells one version of the file (or of each of a folder's files) from another."""
    if os.path.isdir(path):
        names = sorted(os.listdir(path))
        return tuple((name, *_version(os.path.join(path, name))) for name in names)
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns


@lru_cache(maxsize=64)
def _digest(path: str, *version) -> str:
    if not os.path.isdir(path):
        return _file_sha256(path)
    outer = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isfile(full):
            outer.update(f"{name}\0{_file_sha256(full)}\n".encode())
    return outer.hexdigest()


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()
