"""The models a server can answer with, each in a slot: unloaded, loading, ready (with its engine) or failed.

A slot's model is loaded on first use, in a thread of its own (one load at a time: two at once would need
both models' memory for their peak), while the event loop and every other model's engine go on. A loaded
model is unloaded when it has had no request for its `keep_alive` (a request may set it, as Ollama's
`keep_alive` does; None: never), or when another model needs room: at most `max_loaded` models, and their
estimated memory (file size + KV pool) within `memory_budget`, the least recently used idle model going first.
A model in use (a lease: a request between its model lookup and its last byte, leases.py) is never unloaded.

    unloaded ──acquire──> loading ──> ready ──idle past keep_alive, or evicted──> unloaded
                                  └─> failed (stays: /health and every request say why)
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..engine.async_engine import AsyncEngine
from ..engine.engine import Engine
from ..engine.model_parts import ModelParts
from ..errors import TinyLLMError
from .checks.admission import PromptLimits, max_token_chars
from .metrics import ServerMetrics
from .wire.client_text import clip
from .wire.errors import APIError
from .wire.logprobs import TokenTexts

log = logging.getLogger("tinyllm.server")


@dataclass(frozen=True)
class ModelSource:
    """One model the server may answer with: `load()` returns an LLM (or `llm` is one already)."""

    name: str | None  # None: named after its file once loaded (a server of one model)
    load: Callable[[], object] | None = None
    llm: object = None
    aliases: frozenset | None = None  # other names a client may send; None: the file's names, once loaded
    path: str | None = None  # for listings before it loads
    keep_alive_s: float | None = None  # idle seconds before unloading; None: never
    context_length: int | None = None  # for listings before it loads (read from the file's header)
    preload: bool = False  # loaded when the server starts

    def __post_init__(self) -> None:
        if (self.load is None) == (self.llm is None):
            raise ValueError("a model source needs exactly one of load (a function) or llm (a loaded model)")
        if self.keep_alive_s is not None and not self.keep_alive_s >= 0:
            raise ValueError(f"keep_alive_s must be None or >= 0, got {self.keep_alive_s!r}")

    def file_bytes(self) -> int:
        """Bytes of the model's file (or folder) on disk: the weights' estimate before it loads."""
        if self.path is None or not os.path.exists(self.path):
            return 0
        if os.path.isfile(self.path):
            return os.path.getsize(self.path)
        return sum(e.stat().st_size for e in os.scandir(self.path) if e.is_file())


@dataclass
class Ready:
    """A loaded model and what every handler needs of it: handlers read the model through `parts` (what the
    engine runs), `info()` and `path`, never through the LLM, which the slot keeps to close."""

    llm: object
    engine: AsyncEngine
    texts: TokenTexts
    model_name: str
    limits: PromptLimits
    aliases: frozenset = frozenset()  # other names clients may send for the model (its file name)
    embedder: object = None  # its Embedder (endpoints/embeddings.py): one queue and worker per model
    slot: Slot | None = None

    @property
    def parts(self) -> ModelParts:
        """The model, tokenizer, config, eos ids and grammars its engine runs."""
        return self.llm.parts

    @property
    def tokenizer(self):
        return self.parts.tokenizer

    @property
    def context_length(self) -> int:
        return self.parts.config.context_length

    @property
    def path(self) -> str:
        """The model's file or folder ("" for a model built in memory without one)."""
        return str(getattr(self.llm, "path", "") or "")

    def info(self) -> dict:
        """The model's description, as `tinyllm info` prints it (model/info.py)."""
        return self.llm.info()

    def check_model(self, model: str | None) -> None:
        # A request may leave `model` out; one that names another model gets OpenAI's 404.
        if model is not None and model != self.model_name and model not in self.aliases:
            raise APIError(
                404,
                f"the model {clip(model)!r} was not found: this server serves {self.model_name!r}",
                param="model",
                code="model_not_found",
            )


def model_aliases(llm) -> frozenset:
    """The model's file name with and without its extension: clients copy either from the file system."""
    path = str(getattr(llm, "path", "") or "")
    name = os.path.basename(path.rstrip("/\\"))
    return frozenset(n for n in (name, os.path.splitext(name)[0]) if n)


def default_model_name(llm) -> str:
    if getattr(llm, "format", None) == "memory":  # built in memory: no file to name it after
        return "tinyllm"
    path = str(getattr(llm, "path", "") or "")
    name = os.path.basename(path.rstrip("/\\"))
    return os.path.splitext(name)[0] if name.endswith(".gguf") else (name or "tinyllm")


def pool_line(engine: Engine) -> str:
    """The start-up line's words on the KV pool: its size, and how long writing it took (resident_kv)."""
    storage = engine.storage
    pool = f"its KV pool ({storage.nbytes() / (1 << 30):.2f} GiB, {storage.num_blocks} blocks of {storage.block_size}"
    if storage.resident:
        return f"{pool} tokens) was written in {engine.kv_setup_s:.2f} s"
    return f"{pool} tokens) is mapped as it fills"


class Slot:
    """One source's state. Every field is read and written on the event loop, but the load's own work."""

    def __init__(self, source: ModelSource):
        self.source = source
        self.status = "unloaded"  # unloaded | loading | ready | failed
        self.ready: Ready | None = None
        self.error: str | None = None
        self.error_kind: str | None = None
        self.leases = 0
        self.last_used = time.monotonic()
        self.keep_alive_s = source.keep_alive_s
        self.loaded = asyncio.Event()  # set when a load ends, either way
        self.bytes = 0  # the estimate held against the budget while loading or loaded
        self.seen_name: str | None = None
        self.seen_aliases: frozenset = frozenset()
        self.context_length: int | None = source.context_length

    @property
    def name(self) -> str:
        """The name requests use: the source's, or, for a model named after its file, the name it loaded as."""
        return self.source.name or self.seen_name or "the model"

    def seen(self, ready: Ready) -> None:
        """What a load told of the model, kept while it is unloaded: its name, aliases and context length."""
        self.seen_name, self.seen_aliases = ready.model_name, ready.aliases
        self.context_length = ready.context_length

    def check_name(self, model: str) -> None:
        """404 unless `model` is this slot's name or an alias (a server of one model, once it has loaded)."""
        aliases = self.source.aliases if self.source.aliases is not None else self.seen_aliases
        if model != self.name and model not in aliases:
            raise APIError(
                404,
                f"the model {clip(model)!r} was not found: this server serves {self.name!r}",
                param="model",
                code="model_not_found",
            )

    def idle_s(self, now: float) -> float:
        return 0.0 if self.leases else now - self.last_used

    def expired(self, now: float) -> bool:
        return (
            self.status == "ready"
            and not self.leases
            and self.keep_alive_s is not None
            and self.idle_s(now) >= self.keep_alive_s
        )


@dataclass(frozen=True)
class SlotLimits:
    """What may stay loaded at once: `max_loaded` models, `memory_budget` bytes (None: no limit); a request
    waits up to `wait_s` for a busy model to free room before a 503."""

    max_loaded: int = 3
    memory_budget: int | None = None
    wait_s: float = 60.0

    def __post_init__(self) -> None:
        if isinstance(self.max_loaded, bool) or not isinstance(self.max_loaded, int) or self.max_loaded < 1:
            raise ValueError(f"max_loaded must be a positive integer, got {self.max_loaded!r}")
        if self.memory_budget is not None and not self.memory_budget > 0:
            raise ValueError(f"memory_budget must be None or > 0 bytes, got {self.memory_budget!r}")
        if not self.wait_s >= 0:
            raise ValueError(f"wait_s must be >= 0, got {self.wait_s!r}")


class Builder:
    """Loads a source and starts its engine (in the load thread)."""

    def __init__(self, engine_options: dict, metrics: ServerMetrics, make_embedder: Callable[[], object]):
        self.options, self.metrics, self.make_embedder = engine_options, metrics, make_embedder

    def kv_bytes(self) -> int:
        return 0 if "num_blocks" in self.options else int(self.options.get("kv_memory_bytes", 1 << 30))

    def build(self, source: ModelSource) -> Ready:
        llm = source.llm if source.llm is not None else source.load()
        # The engine thread never compiles a grammar (one the handlers did not compile ahead compiles on a
        # grammar thread while its request waits), and the grammar engine's token table is built now, in
        # the background, not inside the first structured request.
        options, parts = {"compile_grammars_on_add": False, **self.options}, llm.parts
        engine = AsyncEngine(Engine(parts, **options), self.metrics)
        parts.grammars.warm_up()
        limits = PromptLimits(parts.config.context_length, max_token_chars(parts.tokenizer))
        name = source.name or default_model_name(llm)
        aliases = model_aliases(llm) if source.aliases is None else source.aliases
        texts = TokenTexts(parts.tokenizer)
        ready = Ready(llm, engine.start(), texts, name, limits, aliases, self.make_embedder())
        log.info("model %s is ready; %s", name, pool_line(engine.engine))
        return ready

    @staticmethod
    def close(ready: Ready, owned: bool) -> None:
        """Stop a model's embeddings and engine; an LLM the server loaded itself is closed too."""
        if ready.embedder is not None:
            ready.embedder.close()
        ready.engine.shutdown()
        if owned:
            ready.llm.close()  # a tensor-parallel LLM stops its worker processes


def failure_kind(exc: BaseException) -> str:
    return f"{type(exc).__name__} while loading the model (see the server log)"


class Loads:
    """Starts loads in threads, one at a time, and hands each result back to the event loop."""

    def __init__(self, builder: Builder):
        self.builder = builder
        self.lock = threading.Lock()  # one load, or one unload, at a time
        self.stopped = False

    def start(self, slot: Slot, done: Callable[[Slot, Ready | None, BaseException | None], None]) -> None:
        loop = asyncio.get_running_loop()
        slot.status, slot.loaded = "loading", asyncio.Event()

        what = "the model" if slot.source.name is None else f"the model {slot.source.name}"

        def run() -> None:
            ready, error = None, None
            with self.lock:
                if self.stopped:
                    return
                try:
                    ready = self.builder.build(slot.source)
                except TinyLLMError as exc:  # the server's own options (e.g. a KV format the model cannot take)
                    log.error("loading %s failed: %s", what, exc)
                    error = exc
                except BaseException as exc:
                    log.exception("loading %s failed", what)
                    error = exc
            try:
                loop.call_soon_threadsafe(done, slot, ready, error)
            except RuntimeError:  # the loop is gone: the server stopped while this loaded
                if ready is not None:
                    Builder.close(ready, slot.source.llm is None)

        threading.Thread(target=run, name=f"tinyllm-loader-{slot.name}", daemon=True).start()
