"""ModelLeases: holds the models a request uses until its response's last byte has gone (or its client left).

A route's model lookup (`ServerState.acquire`) adds the model's slot to the request's list here; the list is
released when the app's call for the request returns, which for a streamed answer is after its last event. So
keep_alive counts idle time from the end of a request, as Ollama's does, and no model is unloaded under a
request that still streams from it.
"""

from __future__ import annotations

LEASES = "tinyllm.leases"  # the scope key of a request's list of held slots


class ModelLeases:
    """Pure ASGI (not BaseHTTPMiddleware: that would end before a streamed body does)."""

    def __init__(self, app, state):
        self.app, self.state = app, state

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held = scope[LEASES] = []
        try:
            await self.app(scope, receive, send)
        finally:
            for slot in held:
                self.state.release(slot)


def leases_of(scope: dict) -> list | None:
    return scope.get(LEASES)
