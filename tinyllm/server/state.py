"""The server's models (model_slots.py), found by the name a request sends, loaded on first use or at start-up
in a background thread so the port answers (/health: 503 while a preloaded model loads), and unloaded when
idle past their keep_alive or when another needs the room."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable

from ..engine.async_engine import SHUTTING_DOWN
from .metrics import ServerMetrics
from .model_slots import (
    Builder,
    Loads,
    ModelSource,
    Ready,
    Slot,
    SlotLimits,
    default_model_name,
    failure_kind,
    model_aliases,
    pool_line,
)
from .wire.client_text import clip
from .wire.errors import APIError

__all__ = ["Ready", "ServerState", "default_model_name", "model_aliases", "pool_line"]

log = logging.getLogger("tinyllm.server")
REAP_EVERY_S = 0.5  # how often idle models are checked against their keep_alive


class ServerState:
    """The slots, by name; the first source is the default (a request without `model` gets it)."""

    def __init__(
        self,
        sources: list[ModelSource],
        engine_options: dict,
        metrics: ServerMetrics,
        make_embedder: Callable[[], object],
        limits: SlotLimits | None = None,
    ):
        if not sources:
            raise ValueError("a server needs at least one model")
        if len(sources) > 1 and any(s.name is None or s.aliases is None for s in sources):
            raise ValueError("a server of several models needs each one's name and aliases before it loads")
        self.metrics, self.limits = metrics, limits or SlotLimits()
        self.slots = [Slot(s) for s in sources]
        self.many = len(self.slots) > 1
        self._by_name: dict[str, Slot] = {}
        if self.many:
            for slot in self.slots:  # a model's own name wins over another's alias
                for name in sorted(slot.source.aliases):
                    self._by_name.setdefault(name, slot)
            self._by_name.update({slot.name: slot for slot in self.slots})
        self._loads = Loads(Builder(engine_options, metrics, make_embedder))
        self._changed = asyncio.Event()  # made again after every change: a lease freed, a model unloaded
        self._reaper: asyncio.Task | None = None
        self.draining = False  # shutting down: running requests finish, new ones get 503
        self._enders: list = []  # what else end_requests stops

    # ---- what the single-model routes and /health read
    @property
    def default(self) -> Slot:
        return self.slots[0]

    @property
    def ready(self) -> Ready | None:
        return self.default.ready

    @property
    def status(self) -> str:
        return self.default.status

    @property
    def error_kind(self) -> str | None:
        return self.default.error_kind

    # ---- start and stop
    def start_loading(self) -> None:
        """On the event loop, at start-up: the preloaded models load (in order, in the background)."""
        self._changed = asyncio.Event()
        for slot in self.slots:
            if slot.source.preload:
                slot.bytes = self._estimate(slot)
                self._loads.start(slot, self._loaded)
        self._reaper = asyncio.get_running_loop().create_task(self._reap())

    def also_end(self, end) -> None:
        """`end()` is called by end_requests too: another worker whose requests must end with the engines'."""
        self._enders.append(end)

    def end_requests(self) -> None:
        """Stop every engine: each request still running ends with EngineStopped("the server is shutting
        down"), which its handler answers with its final event (a stream) or a 503; queued embeddings get 503
        and the other workers (also_end) end theirs. Blocks up to one step."""
        for end in self._enders:
            end()
        for ready in self._loaded_models():
            if ready.embedder is not None:
                ready.embedder.close()
            ready.engine.shutdown()

    def shutdown(self) -> None:
        self._loads.stopped = True
        if self._reaper is not None:
            self._reaper.cancel()
        for slot in self.slots:
            if slot.ready is not None:
                Builder.close(slot.ready, owned=slot.source.llm is None)

    def _loaded_models(self) -> list[Ready]:
        return [s.ready for s in self.slots if s.ready is not None]

    # ---- requests
    def slot_for(self, model: str | None) -> Slot:
        """The slot a request's `model` names (None: the default); 404 for a name not served here. A server of
        one model answers every name with it: its route's check_model says 404 (it knows the name once loaded)."""
        if model is None or not self.many:
            return self.default
        slot = self._by_name.get(model) or self._by_name.get(model.removesuffix(":latest"))
        if slot is None:
            served = ", ".join(repr(s.name) for s in self.slots[:8])
            raise APIError(
                404,
                f"the model {clip(model)!r} was not found: this server serves {served}",
                param="model",
                code="model_not_found",
            )
        return slot

    def require(self, slot: Slot | None = None) -> Ready:
        """A loaded slot's model, or a 503 that says why not."""
        slot = slot or self.default
        if self.draining:
            raise APIError(503, SHUTTING_DOWN, code="server_shutting_down")
        if slot.ready is None:
            if slot.status == "failed":
                raise APIError(503, f"the model failed to load ({slot.error_kind})", code="model_not_ready")
            raise APIError(503, "the model is loading", code="model_not_ready")
        if not slot.ready.engine.alive:
            raise APIError(503, "the engine is not running", code="engine_stopped")
        return slot.ready

    async def acquire(self, model: str | None, leases: list | None) -> Ready:
        """The named model, loaded first if it is not (waiting for room if others are busy). With `leases` (the
        request's list, leases.py), the model is held until the response's last byte."""
        slot = self.slot_for(model)
        deadline = time.monotonic() + self.limits.wait_s
        while slot.status != "ready":
            if self.draining or slot.status == "failed" or self._starting(slot):
                break  # require() says why: the start-up load is /health's 503, not a wait
            if slot.status == "unloaded":
                await self._make_room(slot, deadline)
                if slot.status == "unloaded":
                    self._loads.start(slot, self._loaded)
            await slot.loaded.wait()
        ready = self.require(slot)
        if leases is not None:
            slot.leases += 1
            leases.append(slot)
        slot.last_used = time.monotonic()
        slot.keep_alive_s = slot.source.keep_alive_s  # until this request says otherwise (keep())
        return ready

    @staticmethod
    def _starting(slot: Slot) -> bool:
        """The server's first load of a model it preloads: requests get 503 meanwhile, as /health does."""
        return slot.status == "loading" and slot.source.preload and slot.seen_name is None

    def keep(self, ready: Ready, keep_alive_s: float | None) -> None:
        """A request's own keep_alive for its model: idle seconds before it unloads (None: never)."""
        if ready.slot is not None:
            ready.slot.keep_alive_s = keep_alive_s

    def release(self, slot: Slot) -> None:
        """A lease's end (the response's last byte went out, or the client left)."""
        slot.leases -= 1
        slot.last_used = time.monotonic()
        if slot.expired(slot.last_used):  # keep_alive 0: out as soon as nobody uses it
            self._unload(slot)
        self._signal()

    async def unload(self, model: str | None) -> None:
        """Ollama's keep_alive 0 with nothing to generate: unload the model now if nobody uses it, else once
        its last request ends."""
        slot = self.slot_for(model)
        slot.keep_alive_s = 0.0
        if slot.status == "ready" and not slot.leases:
            self._unload(slot)

    # ---- loading, unloading
    def _loaded(self, slot: Slot, ready: Ready | None, error: BaseException | None) -> None:
        """On the event loop: a load ended."""
        if ready is None:
            slot.status, slot.bytes = "failed", 0
            slot.error, slot.error_kind = f"{type(error).__name__}: {error}", failure_kind(error)
        elif self._loads.stopped:
            Builder.close(ready, owned=slot.source.llm is None)
            return
        else:
            ready.slot = slot
            slot.seen(ready)
            slot.ready, slot.status, slot.last_used = ready, "ready", time.monotonic()
        slot.loaded.set()
        self._signal()

    def _unload(self, slot: Slot) -> None:
        ready, owned = slot.ready, slot.source.llm is None
        slot.ready, slot.status, slot.bytes = None, "unloaded", 0
        log.info("model %s unloaded (idle %.0f s)", slot.name, slot.idle_s(time.monotonic()))

        def close() -> None:
            with self._loads.lock:  # the next load waits for this model's memory to be back
                Builder.close(ready, owned)
                gc.collect()  # now, not at the next collection

        asyncio.get_running_loop().run_in_executor(None, close)

    def _estimate(self, slot: Slot) -> int:
        return slot.source.file_bytes() + self._loads.builder.kv_bytes()

    async def _make_room(self, slot: Slot, deadline: float) -> None:
        """Unload idle models (least recently used first) until `slot` fits the limits, or wait for one to
        become idle. A model alone larger than the budget still loads when nothing else is loaded."""
        need, budget = self._estimate(slot), self.limits.memory_budget
        while True:
            held = [s for s in self.slots if s is not slot and s.status in ("loading", "ready")]
            fits_budget = budget is None or not held or sum(s.bytes for s in held) + need <= budget
            if len(held) < self.limits.max_loaded and fits_budget:
                slot.bytes = need
                return
            idle = [s for s in held if s.status == "ready" and not s.leases]
            if idle:
                self._unload(min(idle, key=lambda s: s.last_used))
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise APIError(
                    503,
                    f"the model {slot.name!r} cannot load now: the models loaded are all in use "
                    f"(at most {self.limits.max_loaded} at once, or their memory is the budget's); try again",
                    code="model_not_ready",
                    headers={"Retry-After": "5"},
                )
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), left)

    def _signal(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            now = time.monotonic()
            for slot in self.slots:
                if slot.expired(now):
                    self._unload(slot)
                    self._signal()
