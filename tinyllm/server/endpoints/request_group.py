"""RequestGroup: the engine requests behind one HTTP request (n choices x prompts), on one asyncio queue.

`start()` returns once the engine accepted every request, so a bad prompt is a 400 before any byte
of a streamed answer is sent. Iterating yields (choice index, RequestOutput) as the engine produces
them; `close()` aborts whatever is unfinished, and every handler calls it on its way out, so a client
that goes away never leaves a request running.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

from ...engine.async_engine import Accepted, AsyncEngine, Failed, Sink


class RequestGroup:
    def __init__(self, engine: AsyncEngine, size: int):
        self.engine = engine
        base = uuid.uuid4().hex
        self.ids = [f"{base}-{i}" for i in range(size)]
        self._index = {rid: i for i, rid in enumerate(self.ids)}
        self._queue: asyncio.Queue = asyncio.Queue()
        self._unfinished: set[str] = set()
        self._early: list = []  # outputs that arrived while start() still awaited other acceptances

    async def start(self, jobs: list[tuple[list[int], object]]) -> None:
        """Submit (prompt ids, SamplingParams) per choice; raise the first rejection after aborting the rest."""
        sink = Sink(asyncio.get_running_loop(), self._queue)
        for rid, (prompt, params) in zip(self.ids, jobs):
            self._unfinished.add(rid)
            self.engine.add(rid, prompt, params, sink)
        pending, error = set(self.ids), None
        try:
            while pending:
                event = await self._queue.get()
                if isinstance(event, Accepted):
                    pending.discard(event.request_id)
                elif isinstance(event, Failed):
                    pending.discard(event.request_id)
                    self._unfinished.discard(event.request_id)
                    error = error or event.error
                else:
                    self._early.append(event)
        finally:
            if error is not None or pending:  # rejected, or cancelled (client gone) while waiting
                self.close()
        if error is not None:
            raise error

    async def outputs(self) -> AsyncIterator[tuple[int, object]]:
        """(choice index, RequestOutput) until every choice finished; raises a request's failure."""
        while self._unfinished:
            event = self._early.pop(0) if self._early else await self._queue.get()
            if isinstance(event, Failed):
                self._unfinished.discard(event.request_id)
                raise event.error
            if isinstance(event, Accepted):
                continue
            if event.finished:
                self._unfinished.discard(event.request_id)
            yield self._index[event.request_id], event

    def close(self) -> None:
        """Abort every unfinished request (safe to call twice, and after everything finished)."""
        for rid in self._unfinished:
            self.engine.abort(rid)
        self._unfinished.clear()
