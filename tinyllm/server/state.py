"""The server's model, loaded in a background thread so the port answers (/health: 503) while a
large model loads, and everything a handler needs once it is ready."""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

from .async_engine import AsyncEngine
from .errors import APIError
from .logprobs import TokenTexts
from .metrics import ServerMetrics

log = logging.getLogger("tinyllm.server")


@dataclass
class Ready:
    llm: object
    engine: AsyncEngine
    texts: TokenTexts
    model_name: str

    @property
    def tokenizer(self):
        return self.llm.tokenizer

    @property
    def context_length(self) -> int:
        return self.llm.config.context_length

    def check_model(self, model: str | None) -> None:
        # A request may leave `model` out; one that names another model gets OpenAI's 404.
        if model is not None and model != self.model_name:
            raise APIError(404, f"the model {model!r} does not exist; this server serves {self.model_name!r}",
                           param="model", code="model_not_found")


def default_model_name(llm) -> str:
    if getattr(llm, "format", None) == "memory":  # built in memory: no file to name it after
        return "tinyllm"
    path = str(getattr(llm, "path", "") or "")
    name = os.path.basename(path.rstrip("/\\"))
    return os.path.splitext(name)[0] if name.endswith(".gguf") else (name or "tinyllm")


class ServerState:
    def __init__(self, llm_or_loader, engine_options: dict, served_model_name: str | None, metrics: ServerMetrics):
        self._source, self._options = llm_or_loader, engine_options
        self.served_model_name, self.metrics = served_model_name, metrics
        self.status, self.error = "loading", None
        self.ready: Ready | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    def start_loading(self) -> None:
        self._thread = threading.Thread(target=self._load, name="tinyllm-loader", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        try:
            # An LLM object is used as is; anything callable is a loader that returns one.
            llm = self._source() if callable(self._source) else self._source
            engine = AsyncEngine(llm.engine(**self._options), self.metrics)
            name = self.served_model_name or default_model_name(llm)
            if self._stopped:  # shut down while loading: do not start a thread nobody will stop
                return
            self.ready = Ready(llm, engine.start(), TokenTexts(llm.tokenizer), name)
            self.status = "ready"
            log.info("model %s is ready", name)
        except BaseException as exc:
            log.exception("loading the model failed")
            self.status, self.error = "failed", f"{type(exc).__name__}: {exc}"

    def require(self) -> Ready:
        """The ready model, or a 503 that says why not."""
        if self.ready is None:
            why = f"the model failed to load ({self.error})" if self.status == "failed" else "the model is loading"
            raise APIError(503, why, code="model_not_ready")
        if not self.ready.engine.alive:
            raise APIError(503, "the engine is not running", code="engine_stopped")
        return self.ready

    def shutdown(self) -> None:
        self._stopped = True
        if self.ready is not None:
            self.ready.engine.shutdown()
