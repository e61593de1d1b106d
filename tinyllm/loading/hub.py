"""Hugging Face Hub ids -> files on this machine, through huggingface_hub and its cache:

    org/name             a safetensors repo: its config, generation config, tokenizer files and weights
    org/name:QUANT       a GGUF repo's one .gguf whose file name holds QUANT (any case)
    org/name             a GGUF repo's only .gguf, or its Q4_K_M one where it holds several
    org/name/file.gguf   that file

The cache answers first, with no network; else the files are downloaded (huggingface_hub's progress bars). Offline
(HF_HUB_OFFLINE=1, or the Hub unreachable) and not cached, the answer is one TinyLLMError line. huggingface_hub is
imported only here, and only when an id is looked up."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

from ..errors import TinyLLMError
from .model_names import GGUF_SUFFIX, is_split_part

REPO = r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*?"
HUB_ID = re.compile(rf"(?P<repo>{REPO})(?::(?P<tag>[A-Za-z0-9][\w.-]*)|/(?P<file>(?:[\w.-]+/)*[\w.-]+\.gguf))?", re.I)
DEFAULT_QUANT = "Q4_K_M"  # what Ollama takes from a Hugging Face GGUF repo named without a tag
SAFETENSORS_FILES = (  # a safetensors repo's files a model needs, besides its *.safetensors weights
    "config.json",
    "generation_config.json",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)
MAX_LISTED = 12  # file names an error lists


@dataclass(frozen=True)
class HubId:
    repo: str  # org/name
    tag: str | None = None  # a quantization the .gguf file's name holds
    file: str | None = None  # a .gguf file's path in the repo

    def __str__(self) -> str:
        return self.repo + (f":{self.tag}" if self.tag else "") + (f"/{self.file}" if self.file else "")


def parse_hub_id(text: str) -> HubId | None:
    """The Hub id `text` spells, or None."""
    m = HUB_ID.fullmatch(text)
    return None if m is None else HubId(m["repo"], m["tag"], m["file"])


@dataclass(frozen=True)
class HubFiles:
    """What an id names, in huggingface_hub's cache: the repo's snapshot folder and the files taken from it."""

    folder: str
    files: tuple[str, ...]  # paths in the repo

    @property
    def is_gguf(self) -> bool:
        return len(self.files) == 1 and self.files[0].lower().endswith(GGUF_SUFFIX)

    @property
    def path(self) -> str:
        """What the loader takes: the .gguf file, or the folder."""
        return os.path.join(self.folder, self.files[0]) if self.is_gguf else self.folder


def _listed(files: list[str]) -> str:
    names = sorted(os.path.basename(f) for f in files)
    more = f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
    return ", ".join(names[:MAX_LISTED]) + more


def _one_gguf(hub_id: HubId, found: list[str], why: tuple[str, str], ggufs: list[str]) -> str:
    """The one loadable file among `found` (the files that match `why`: said of one file, of several), or the
    error naming them."""
    whole = [f for f in found if not is_split_part(f)]
    if len(whole) == 1:
        return whole[0]
    if not whole and found:
        raise TinyLLMError(
            f"{found[0]!r} of {hub_id.repo} is one part of a split GGUF, which tinyllm cannot load; merge the parts "
            "with llama.cpp's llama-gguf-split --merge and give the merged file"
        )
    if not whole:
        raise TinyLLMError(f"no .gguf file of {hub_id.repo} {why[0]}; its .gguf files are: {_listed(ggufs) or 'none'}")
    raise TinyLLMError(
        f"{len(whole)} .gguf files of {hub_id.repo} {why[1]} ({_listed(whole)}); name one as {hub_id.repo}/FILE.gguf"
    )


def _holding(tag: str) -> tuple[str, str]:
    return f"has {tag!r} in its name", f"have {tag!r} in their names"


def choose_files(hub_id: HubId, files: list[str]) -> list[str]:
    """The files of a repo (`files`: every path in it) that `hub_id` names, or a TinyLLMError saying why none."""
    ggufs = [f for f in files if f.lower().endswith(GGUF_SUFFIX) and not os.path.basename(f).startswith("mmproj")]
    if hub_id.file is not None:
        found = [f for f in files if f.lower() == hub_id.file.lower()]
        return [_one_gguf(hub_id, found, (f"is named {hub_id.file!r}",) * 2, ggufs)]
    if hub_id.tag is not None:
        found = [f for f in ggufs if hub_id.tag.lower() in os.path.basename(f).lower()]
        return [_one_gguf(hub_id, found, _holding(hub_id.tag), ggufs)]
    whole = [f for f in ggufs if not is_split_part(f)]
    if len(whole) == 1:
        return whole
    if ggufs:  # several, or the parts of one split model (which _one_gguf refuses)
        found = [f for f in ggufs if DEFAULT_QUANT.lower() in os.path.basename(f).lower()] or ([] if whole else ggufs)
        if found:
            return [_one_gguf(hub_id, found, _holding(DEFAULT_QUANT), ggufs)]
        raise TinyLLMError(
            f"{hub_id.repo} holds {len(ggufs)} .gguf files ({_listed(ggufs)}); name one as {hub_id.repo}:QUANT"
        )
    weights = [f for f in files if "/" not in f and f.endswith(".safetensors")]
    if "config.json" not in files or not weights:
        raise TinyLLMError(f"{hub_id.repo} holds no .gguf file and no config.json with .safetensors weights")
    return sorted(f for f in files if f in SAFETENSORS_FILES) + sorted(weights)


def _hf():
    """huggingface_hub, imported on first use (its import costs a few tenths of a second)."""
    import huggingface_hub
    import huggingface_hub.constants
    import huggingface_hub.errors

    return huggingface_hub


def cached(hub_id: HubId) -> HubFiles | None:
    """The id's files where huggingface_hub's cache holds them all, without the network; else None."""
    hf = _hf()
    try:  # allow_patterns=[]: the snapshot folder, however few of the repo's files it holds
        folder = hf.snapshot_download(hub_id.repo, local_files_only=True, allow_patterns=[])
    except (hf.errors.LocalEntryNotFoundError, OSError):
        return None
    listing = _cached_listing(hf, hub_id.repo)
    try:
        chosen = choose_files(hub_id, listing if listing is not None else _files_under(folder))
    except TinyLLMError:
        if listing is not None:
            raise  # the repo's own listing: the same answer as online
        return None  # the files cached so far may not be all the repo holds: ask the Hub
    if not all(os.path.exists(os.path.join(folder, f)) for f in chosen):
        return None
    return HubFiles(folder, tuple(chosen))


def _files_under(folder: str) -> list[str]:
    """Every file under folder, as repo paths (a/b.gguf)."""
    paths = (os.path.join(d, f) for d, _, files in os.walk(folder) for f in files)
    return [os.path.relpath(p, folder).replace(os.sep, "/") for p in paths]


def _cached_listing(hf, repo: str) -> list[str] | None:
    """The repo's whole file listing as snapshot_download cached it (recent huggingface_hub versions), or None."""
    get_tree = getattr(hf, "get_cached_repo_tree", None)
    if get_tree is None:
        return None
    try:
        return [f.path for f in get_tree(repo)]
    except (hf.errors.CachedRepoTreeNotFoundError, OSError, ValueError):  # none cached, or unreadable
        return None


def _unreachable(hub_id: HubId, hf, why: str) -> TinyLLMError:
    return TinyLLMError(
        f"{str(hub_id)!r} is not in the Hugging Face cache ({hf.constants.HF_HUB_CACHE}) and the Hub cannot be reached "
        f"({why}); download it once while online (tinyllm pull {hub_id}), or give a local .gguf file or folder"
    )


def _network_errors(hf) -> tuple[type[BaseException], ...]:
    """What a request raises where the Hub cannot be reached: offline mode, a refused or failed connection."""
    errors = hf.errors
    kinds: list[type[BaseException]] = [errors.OfflineModeIsEnabled, errors.LocalEntryNotFoundError]
    kinds += [ConnectionError, TimeoutError]
    for module in ("httpx2", "httpx"):  # huggingface_hub's HTTP client, by version
        with contextlib.suppress(ImportError, AttributeError):
            kinds.append(__import__(module).TransportError)
    return tuple(kinds)


def _download(hub_id: HubId, hf) -> HubFiles:
    """List the repo, choose its files, download them into the cache (with huggingface_hub's progress bars)."""
    info = hf.HfApi().model_info(hub_id.repo)  # one request, never retried: an unreachable Hub answers at once
    files = [s.rfilename for s in info.siblings or []]
    chosen = choose_files(hub_id, files)
    folder = hf.snapshot_download(hub_id.repo, allow_patterns=chosen)
    return HubFiles(folder, tuple(chosen))


def fetch(hub_id: HubId, *, update: bool = False) -> HubFiles:
    """The id's files, from the cache or else downloaded; update: ask the Hub first (the cache where it cannot be
    reached)."""
    hf = _hf()
    found = None if update else cached(hub_id)
    if found is not None:
        return found
    errors = hf.errors
    try:
        return _download(hub_id, hf)
    except errors.GatedRepoError:
        raise TinyLLMError(
            f"{hub_id.repo} is gated on the Hugging Face Hub: accept its terms on its page, then log in (hf auth login)"
        ) from None
    except errors.RepositoryNotFoundError:
        raise TinyLLMError(
            f"{hub_id.repo!r} is not a model repository on the Hugging Face Hub (if it is private, log in: "
            "hf auth login)"
        ) from None
    except errors.HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", "an error")
        raise TinyLLMError(f"the Hugging Face Hub answered {status} for {hub_id.repo!r}") from None
    except _network_errors(hf) as exc:
        found = cached(hub_id) if update else None
        if found is not None:
            return found
        offline = isinstance(exc, errors.OfflineModeIsEnabled)
        why = (str(exc).splitlines() or [""])[0][:100] or type(exc).__name__
        raise _unreachable(hub_id, hf, "HF_HUB_OFFLINE is set" if offline else why) from None
