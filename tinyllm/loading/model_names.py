"""The models directory's naming rule, both ways. DIR is the models directory; a name's parts are joined by "/"
and its tag follows a ":", as Ollama (`name:tag`) and Hugging Face (`org/repo`) spell them:

    DIR/A.gguf                    <->  A
    DIR/A/B.gguf                  <->  A:B        an Ollama-style name:tag
    DIR/A/B/C.gguf                <->  A/B:C      a GGUF pulled from the Hugging Face repo A/B
    DIR/A/B/ holding config.json  <->  A/B        a Hugging Face model folder (DIR/A/ <-> A)

`model_store.find_stored` adds the looser lookups (a name without a tag finds the one model under it; ":latest"
is dropped where no file is named so). Pure string work: nothing here touches the file system."""

from __future__ import annotations

import re

GGUF_SUFFIX = ".gguf"
PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"  # never "." or "..": a name cannot climb out of DIR
NAME = re.compile(rf"(?P<path>{PART}(?:/{PART})*)(?::(?P<tag>{PART}))?")
SPLIT_PART = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.I)  # llama.cpp's split files: NAME-00001-of-00003.gguf
LATEST = "latest"  # Ollama's tag for a name given without one


def is_name(text: str) -> bool:
    return NAME.fullmatch(text) is not None


def split_name(name: str) -> tuple[list[str], str | None]:
    """A valid name's path parts and its tag (None without one)."""
    m = NAME.fullmatch(name)
    assert m is not None, name
    return m["path"].split("/"), m["tag"]


def is_split_part(file_name: str) -> bool:
    return SPLIT_PART.search(file_name) is not None


def gguf_name(parts: list[str]) -> str | None:
    """The name of DIR/<parts>.gguf (parts: its path under DIR, the last one without .gguf), or None where the
    path spells no name."""
    name = parts[0] if len(parts) == 1 else "/".join(parts[:-1]) + ":" + parts[-1]
    return name if is_name(name) else None


def folder_name(parts: list[str]) -> str | None:
    """The name of the Hugging Face folder DIR/<parts>/, or None where the path spells no name."""
    name = "/".join(parts)
    return name if is_name(name) and ":" not in name else None


def gguf_parts(name: str) -> list[str] | None:
    """The path under DIR of the GGUF file that a tagged name names (its last part with .gguf); None without a
    tag."""
    parts, tag = split_name(name)
    return None if tag is None else [*parts, tag + GGUF_SUFFIX]
