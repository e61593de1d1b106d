"""The tokenizer of a GGUF file, from the metadata it holds (text/ builds it; this reads the file)."""

from __future__ import annotations

from ..text.tokenizer import Tokenizer
from .gguf_file import GGUFFile, open_gguf


def gguf_tokenizer(path_or_file: str | GGUFFile) -> Tokenizer:
    """A GGUF file's tokenizer, given its path or the file already opened."""
    g = path_or_file if isinstance(path_or_file, GGUFFile) else open_gguf(path_or_file)
    return Tokenizer.from_gguf_metadata(g.metadata)
