"""AsyncEngine: the (not thread-safe) Engine driven by one background thread, for asyncio handlers.

Handlers never touch the Engine. They post add/abort commands to a locked inbox; the engine thread
drains the inbox before every step(), so all Engine calls happen on that thread, and hands each output
to the request's asyncio queue with `loop.call_soon_threadsafe` (asyncio queues are not thread-safe).
With nothing to do the thread sleeps on a condition instead of spinning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..errors import EngineDown, TinyLLMError
from .output_router import EngineFault, Failed, OutputRouter, Route

__all__ = ["Accepted", "AsyncEngine", "EngineFault", "EngineStopped", "Failed", "Sink"]

log = logging.getLogger("tinyllm.server")


SHUTTING_DOWN = "the server is shutting down"  # what every request still running hears when the engine stops


class EngineStopped(RuntimeError):
    """The server is shutting down (or its engine stopped); the request will not be served (further)."""


@dataclass
class Accepted:
    request_id: str


@dataclass
class EngineState:
    """What the engine thread last published, for /health and /metrics (read without a lock)."""

    running: int = 0
    waiting: int = 0
    blocks_total: int = 0
    blocks_used: int = 0
    blocks_cached: int = 0


class Sink:
    """One HTTP request's mailbox: an asyncio queue on the handler's loop, fed from the engine thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue):
        self.loop, self.queue = loop, queue

    def put(self, item: Any) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is listening any more
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


@dataclass
class Live:
    """The engine thread's record of a request it serves (its route's record); metrics read the times.
    `arrival` is when the handler handed the request over; `times` is the engine's RequestTimes (first
    scheduled, first token, finished), updated in place by the engine."""

    arrival: float
    times: Any = None
    first_output: float | None = None
    last_token: float | None = None


@dataclass
class _Add:
    request_id: str
    prompt: list[int]
    params: Any
    sink: Sink
    arrival: float


@dataclass
class _Abort:
    request_id: str


class Observer:
    """Hooks the engine thread calls (metrics); the default does nothing."""

    def on_output(self, live: Live, output, now: float) -> None: ...

    def on_state(self, state: EngineState) -> None: ...

    def on_failed(self, live: Live, error: Exception) -> None: ...


class AsyncEngine:
    PUBLISH_INTERVAL_S = 0.02  # pool_stats() walks the free list: not after every step of a fast model
    IDLE_CHECK_S = 1.0  # an idle engine looks at its tensor-parallel ranks this often

    def __init__(self, engine, observer: Observer | None = None):
        self.engine, self.observer = engine, observer or Observer()
        self.state = EngineState()
        self.error: str | None = None  # why the engine stopped by itself (None while it runs, or when shut down)
        self._cond = threading.Condition()
        self._inbox: list = []
        self._stopping = False
        self._router = OutputRouter()  # engine thread only; each route's record is the request's Live
        self._published = 0.0
        self._thread = threading.Thread(target=self._run, name="tinyllm-engine", daemon=True)

    # ---- any thread
    def start(self) -> AsyncEngine:
        self._publish(force=True)
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stopping

    def add(self, request_id: str, prompt: list[int], params, sink: Sink) -> None:
        """Queue a request; the sink gets Accepted or Failed, then RequestOutputs until one is finished."""
        if not self.alive:
            sink.put(Failed(request_id, EngineStopped("the engine is not running")))
            return
        self._post(_Add(request_id, prompt, params, sink, time.perf_counter()))

    def abort(self, request_id: str) -> None:
        """Stop a request and free its blocks (a no-op for a finished or unknown id)."""
        self._post(_Abort(request_id))

    def shutdown(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _post(self, command) -> None:
        with self._cond:
            self._inbox.append(command)
            self._cond.notify()

    # ---- the engine thread
    def _run(self) -> None:
        try:
            while (commands := self._next_commands()) is not None:
                for command in commands:
                    self._apply(command)
                if commands or self.engine.has_unfinished():
                    self._step()
                else:  # idle for IDLE_CHECK_S
                    self._check_group()
                self._publish(force=not self.engine.has_unfinished())
        except BaseException as exc:  # a bug in this loop itself: say so; the finally still fails every request
            self.error = f"the engine thread stopped ({type(exc).__name__}: {exc})"
            log.exception("the engine thread stopped")
        finally:
            self._stopping = True
            self._fail_all(EngineStopped(SHUTTING_DOWN))

    def _next_commands(self) -> list | None:
        with self._cond:
            while not (self._inbox or self._stopping or self.engine.has_unfinished()):
                if not self._cond.wait(self.IDLE_CHECK_S):
                    return []
            if self._stopping:
                return None
            commands, self._inbox = self._inbox, []
            return commands

    def _apply(self, command) -> None:
        if isinstance(command, _Abort):
            if command.request_id in self._router.routes:
                self.engine.abort(command.request_id)  # its "abort" output comes out of the next step()
            return
        try:
            self.engine.add_request(command.prompt, command.params, command.request_id)
        except TinyLLMError as exc:
            command.sink.put(Failed(command.request_id, exc))
            return
        except Exception as exc:
            log.exception("adding request %s failed", command.request_id)
            command.sink.put(Failed(command.request_id, EngineFault(f"adding the request failed: {exc}")))
            return
        times = self.engine.requests[command.request_id].times
        self._router.open(command.request_id, command.sink, Live(command.arrival, times))
        command.sink.put(Accepted(command.request_id))

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except EngineDown as exc:
            self._down(exc)
            return
        except Exception as exc:
            # One step serves the whole batch and may have half-updated any request in it, so none of
            # their streams can be trusted to be exact any more: fail them, keep the thread serving.
            log.exception("engine step failed")
            self._fail_all(EngineFault(f"the engine failed while generating ({type(exc).__name__}: {exc})"))
            return
        now = time.perf_counter()
        finished = self._router.route(
            outputs, lambda route, output: self._observe(route, output, now), self._route_failed
        )
        for request_id in finished:
            self.engine.release(request_id)

    def _check_group(self) -> None:
        try:
            self.engine.check_group()
        except EngineDown as exc:
            self._down(exc)

    def _down(self, exc: EngineDown) -> None:
        """Nothing can run any more: fail what is in flight, then stop (503 after)."""
        self.error = str(exc)  # e.g. which tensor-parallel rank stopped, how, and its last output
        log.error("the engine is down: %s", exc)
        with self._cond:  # before the requests hear of it: /health says so once a stream has ended
            self._stopping = True
        self._fail_all(EngineFault(str(exc)))

    def _observe(self, route: Route, output, now: float) -> None:
        try:
            self.observer.on_output(route.record, output, now)
        except Exception:
            log.exception("metrics observer failed")

    def _route_failed(self, route: Route, error: Exception) -> None:
        self._notify_failed(route.record, error)

    def _fail_all(self, error: Exception) -> None:
        for request_id in list(self._router.routes):
            try:
                self.engine.abort(request_id)
                self.engine.release(request_id)
            except Exception:
                log.exception("aborting request %s failed", request_id)
        self._router.fail_all(error, self._route_failed)
        with self._cond:
            for command in self._inbox if self._stopping else ():
                if isinstance(command, _Add):
                    command.sink.put(Failed(command.request_id, error))
        try:
            self.engine.step()  # flush the abort outputs so they do not surface later
        except Exception:
            log.exception("flushing aborted requests failed")
        self._publish(force=True)

    def _notify_failed(self, live: Live, error: Exception) -> None:
        try:
            self.observer.on_failed(live, error)
        except Exception:
            log.exception("metrics observer failed")

    def _publish(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._published < self.PUBLISH_INTERVAL_S:
            return
        self._published = now
        try:
            pool = self.engine.pool_stats()
            self.state = EngineState(
                self.engine.num_running(), self.engine.num_waiting(), pool.total, pool.used, pool.cached_free
            )
            self.observer.on_state(self.state)
        except Exception:
            log.exception("publishing engine state failed")
