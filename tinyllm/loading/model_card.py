"""What a model's files say about it beyond its weights: its license (a GGUF's `general.license`, or the
`license:` line of a Hugging Face folder's README front matter), for Ollama's /api/show; its family and context
length, for `tinyllm list`."""

from __future__ import annotations

import json
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


def model_facts(path: str) -> tuple[str | None, int | None]:
    """(family, context length) as a GGUF's header or a folder's config.json gives them, the weights unread;
    None for what the files do not say (or cannot be read)."""
    try:
        if os.path.isdir(path):
            with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
                config = json.load(f)
            family, context = config.get("model_type"), config.get("max_position_embeddings")
        else:
            metadata = read_gguf(path)[0]
            family = metadata.get("general.architecture")
            context = metadata.get(f"{family}.context_length")
    except (OSError, ValueError, AttributeError):
        return None, None
    return (family if isinstance(family, str) else None), (int(context) if isinstance(context, int) else None)
