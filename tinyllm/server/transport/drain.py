"""DrainingServer: uvicorn's server with a shutdown that lets running requests finish.

On SIGTERM or SIGINT the server stops admitting (the state answers 503 "the server is shutting down" to every
new request, /health included) but keeps listening, and waits until no request is in flight or until
`shutdown_timeout_s` has passed. Then it stops the engine: each request still running ends with its final
event (a stream's last chunk with finish_reason "length" and an error event; a whole answer's 503), and
uvicorn's own shutdown follows (close the port, let the last bytes go out, the app's lifespan end). The
process then exits 0, as after any orderly stop. A second signal ends the wait at once; a third cuts every
connection.

    signal ──> draining (503 to new requests) ──> idle, or timeout ──> engine stopped ──> uvicorn shutdown
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import FrameType

import uvicorn

log = logging.getLogger("tinyllm.server")


class DrainingServer(uvicorn.Server):
    """`state` is the app's ServerState (`app.state.server`): its `draining` flag and `end_requests()`."""

    def __init__(self, config: uvicorn.Config, state, shutdown_timeout_s: float):
        super().__init__(config)
        self._state, self._timeout_s = state, shutdown_timeout_s
        self._deadline: float | None = None  # set by the first signal
        self._announced = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler: only flags here (no logging, no locks); on_tick acts on them. The signal is not
        # recorded for uvicorn to raise again after the shutdown, so an orderly stop exits 0.
        if self._deadline is None:
            self._state.draining = True
            self._deadline = time.monotonic() + self._timeout_s
        elif not self.should_exit:
            self._deadline = 0.0
        else:
            self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        if await super().on_tick(counter):
            return True
        if self._deadline is None:
            return False
        in_flight = len(self.server_state.tasks)
        if not self._announced:
            self._announced = True
            log.info("shutting down: %d requests in flight get up to %g s to finish", in_flight, self._timeout_s)
        if in_flight and time.monotonic() < self._deadline:
            return False
        if in_flight:
            log.warning("shutting down: ending the %d requests still running", in_flight)
        await asyncio.to_thread(self._state.end_requests)
        self.should_exit = True
        return True
