"""One output router for both fronts: the engine's outputs handed to the mailbox of the request they belong to.

`LLM` (a deque per request, read by the caller that steps the engine) and `AsyncEngine` (an asyncio queue per
HTTP request, fed from the engine thread) both register each request they add and pass every step's outputs
through `route`. The router decides, in one place, what a caller gets:
- an output of a live request, as it is (its text, its finish);
- an output that ended with finish reason "error" through the request's own fault (its grammar gave up while
  generating) also as it is, to be answered as the caller's mistake;
- any other "error" output as `Failed(request_id, EngineFault)`: the engine's fault, not the caller's;
- nothing for a request that is not registered (finished, failed or dropped already).
A request's registration ends with its finishing output; the router never releases engine state (a front may
still read the request's Generation after it finished).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol


class EngineFault(RuntimeError):
    """The engine failed while running a request (a bug, not the caller's mistake)."""


@dataclass
class Failed:
    request_id: str
    error: Exception


class Mailbox(Protocol):
    def put(self, item: Any) -> None: ...


def is_own_fault(output) -> bool:
    """An output that ended with finish reason "error" through the request's own fault (its grammar gave up
    while generating)."""
    return getattr(output, "error_kind", None) == "grammar"


@dataclass
class Route:
    """A registered request: where its outputs go, and what the front keeps beside it (e.g. metrics times)."""

    mailbox: Mailbox
    record: Any = None


class OutputRouter:
    def __init__(self):
        self.routes: dict[str, Route] = {}

    def open(self, request_id: str, mailbox: Mailbox, record: Any = None) -> None:
        self.routes[request_id] = Route(mailbox, record)

    def close(self, request_id: str) -> Route | None:
        """Stop routing a request's outputs (a no-op for an unknown id); returns its route."""
        return self.routes.pop(request_id, None)

    def route(
        self,
        outputs: Iterable,
        on_output: Callable[[Route, Any], None] | None = None,
        on_failed: Callable[[Route, Exception], None] | None = None,
    ) -> list[str]:
        """Deliver each output (see the module docstring); returns the ids that finished and were closed."""
        finished = []
        for output in outputs:
            rid = output.request_id
            route = self.routes.get(rid)
            if route is None:
                continue
            if output.finish_reason == "error" and not is_own_fault(output):  # the rest of the batch went on
                error = EngineFault(output.error or "the request failed")
                if on_failed is not None:
                    on_failed(route, error)
                route.mailbox.put(Failed(rid, error))
            else:
                if on_output is not None:
                    on_output(route, output)
                route.mailbox.put(output)
            if output.finished:
                del self.routes[rid]
                finished.append(rid)
        return finished

    def fail_all(self, error: Exception, on_failed: Callable[[Route, Exception], None] | None = None) -> list[str]:
        """Fail every registered request with `error`; returns their ids (all closed)."""
        failed = list(self.routes)
        for rid, route in list(self.routes.items()):
            if on_failed is not None:
                on_failed(route, error)
            route.mailbox.put(Failed(rid, error))
        self.routes.clear()
        return failed


class Inbox(deque):
    """A mailbox read on the thread that steps the engine (the LLM's)."""

    def put(self, item: Any) -> None:
        self.append(item)
