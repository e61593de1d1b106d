"""Slow clients must not hold the server: a connection whose request headers take longer than
`header_timeout_s` is closed, a body that stops arriving for `body_timeout_s` answers 408 (limits.py),
and past `max_connections` uvicorn answers 503. uvicorn alone waits forever for slow headers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from uvicorn.protocols.http.h11_impl import H11Protocol


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0  # a whole request line and headers, from the connection's start
    body_timeout_s: float = 30.0  # the longest pause between two parts of a request body
    max_connections: int = 256  # open connections and running requests, each
    keep_alive_s: float = 5.0  # an idle keep-alive connection is closed after this

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if (
            isinstance(self.max_connections, bool)
            or not isinstance(self.max_connections, int)
            or self.max_connections < 1
        ):
            raise ValueError(f"max_connections must be a positive integer, got {self.max_connections!r}")


def guarded_h11(header_timeout_s: float) -> type:
    """uvicorn's h11 protocol, closing connections whose first request's headers do not arrive in time
    (later requests on a kept-alive connection are covered by uvicorn's keep-alive timeout)."""

    class GuardedH11(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._header_timer = asyncio.get_running_loop().call_later(header_timeout_s, self._headers_late)

        def handle_events(self) -> None:
            super().handle_events()
            if getattr(self, "scope", None) is not None:  # a request's headers have been read
                self._header_timer.cancel()

        def connection_lost(self, exc) -> None:
            self._header_timer.cancel()
            super().connection_lost(exc)

        def _headers_late(self) -> None:
            if getattr(self, "scope", None) is None and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11


def uvicorn_options(limits: ConnectionLimits) -> dict:
    """Keyword arguments for uvicorn.Config / uvicorn.run."""
    return dict(
        http=guarded_h11(limits.header_timeout_s),
        limit_concurrency=limits.max_connections,
        timeout_keep_alive=limits.keep_alive_s,
    )
