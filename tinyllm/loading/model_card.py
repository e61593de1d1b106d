"""What a model's files say about it beyond its weights: its license (a GGUF's `general.license`, or the
`license:` line of a Hugging Face folder's README front matter), for Ollama's /api/show."""

from __future__ import annotations

import os
import re

from .gguf_reader import read_gguf

_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.S)
_LICENSE_LINE = re.compile(r"^license:\s*(.+?)\s*$", re.M)


def model_license(path: str) -> str | None:
    """The license the model's files name, or None (no file, or none named)."""
    if not path or not os.path.exists(path):
        return None
    if os.path.isdir(path):
        return _readme_license(os.path.join(path, "README.md"))
    value = read_gguf(path)[0].get("general.license")
    return value if isinstance(value, str) and value else None


def _readme_license(readme: str) -> str | None:
    try:
        with open(readme, encoding="utf-8", errors="replace") as f:
            head = f.read(1 << 16)
    except OSError:
        return None
    front = _FRONT_MATTER.match(head)
    line = _LICENSE_LINE.search(front.group(1)) if front else None
    return line.group(1).strip("'\"") if line else None
