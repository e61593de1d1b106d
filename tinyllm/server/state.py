"""The server's model, loaded in a background thread so the port answers (/health: 503) while a
large model loads, and everything a handler needs once it is ready."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

from ..engine.async_engine import SHUTTING_DOWN, AsyncEngine
from ..engine.engine import Engine
from ..errors import TinyLLMError
from .checks.admission import PromptLimits, max_token_chars
from .metrics import ServerMetrics
from .wire.errors import APIError
from .wire.logprobs import TokenTexts

log = logging.getLogger("tinyllm.server")


@dataclass
class Ready:
    llm: object
    engine: AsyncEngine
    texts: TokenTexts
    model_name: str
    limits: PromptLimits
    aliases: frozenset = frozenset()  # other names clients may send for the model (its file name)

    @property
    def tokenizer(self):
        return self.llm.tokenizer

    @property
    def context_length(self) -> int:
        return self.llm.config.context_length

    def check_model(self, model: str | None) -> None:
        # A request may leave `model` out; one that names another model gets OpenAI's 404.
        if model is not None and model != self.model_name and model not in self.aliases:
            raise APIError(
                404,
                f"the model {model!r} was not found: this server serves {self.model_name!r}",
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


class ServerState:
    def __init__(self, llm_or_loader, engine_options: dict, served_model_name: str | None, metrics: ServerMetrics):
        self._source, self._options = llm_or_loader, engine_options
        self.served_model_name, self.metrics = served_model_name, metrics
        self.status, self.error = "loading", None
        self.error_kind: str | None = None
        self.ready: Ready | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.draining = False  # shutting down: running requests finish, new ones get 503
        self._enders: list = []  # what else end_requests stops (the embeddings' queue)

    def start_loading(self) -> None:
        self._thread = threading.Thread(target=self._load, name="tinyllm-loader", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        try:
            # An LLM object is used as is; anything callable is a loader that returns one.
            llm = self._source() if callable(self._source) else self._source
            # The engine thread never compiles a grammar (one the handlers did not compile ahead compiles on a
            # grammar thread while its request waits), and the grammar engine's token table is built now, in
            # the background, not inside the first structured request.
            options = {"compile_grammars_on_add": False, **self._options}
            engine = AsyncEngine(Engine(llm.parts, **options), self.metrics)
            llm.grammars.warm_up()
            name = self.served_model_name or default_model_name(llm)
            if self._stopped:  # shut down while loading: do not start a thread nobody will stop
                return
            limits = PromptLimits(llm.config.context_length, max_token_chars(llm.tokenizer))
            aliases = model_aliases(llm) if self.served_model_name is None else frozenset()
            self.ready = Ready(llm, engine.start(), TokenTexts(llm.tokenizer), name, limits, aliases)
            self.status = "ready"
            log.info("model %s is ready; %s", name, pool_line(engine.engine))
        except TinyLLMError as exc:  # the server's own options (e.g. a KV format the model cannot take): one line
            log.error("loading the model failed: %s", exc)
            self.status, self.error = "failed", f"{type(exc).__name__}: {exc}"
            self.error_kind = f"{type(exc).__name__} while loading the model (see the server log)"
        except BaseException as exc:
            log.exception("loading the model failed")
            self.status, self.error = "failed", f"{type(exc).__name__}: {exc}"
            self.error_kind = f"{type(exc).__name__} while loading the model (see the server log)"

    def require(self) -> Ready:
        """The ready model, or a 503 that says why not."""
        if self.draining:
            raise APIError(503, SHUTTING_DOWN, code="server_shutting_down")
        if self.ready is None:
            why = f"the model failed to load ({self.error_kind})" if self.status == "failed" else "the model is loading"
            raise APIError(503, why, code="model_not_ready")
        if not self.ready.engine.alive:
            raise APIError(503, "the engine is not running", code="engine_stopped")
        return self.ready

    def also_end(self, end) -> None:
        """`end()` is called by end_requests too: another worker whose requests must end with the engine's."""
        self._enders.append(end)

    def end_requests(self) -> None:
        """Stop the engine: every request still running ends with EngineStopped("the server is shutting
        down"), which its handler answers with its final event (a stream) or a 503; the other workers
        (also_end) answer theirs. Blocks up to one step."""
        for end in self._enders:
            end()
        if self.ready is not None:
            self.ready.engine.shutdown()

    def shutdown(self) -> None:
        self._stopped = True
        if self.ready is not None:
            self.ready.engine.shutdown()
            self.ready.llm.close()  # a tensor-parallel LLM stops its worker processes
