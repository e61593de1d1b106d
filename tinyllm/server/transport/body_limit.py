"""A cap on request body size that answers in OpenAI's error shape (Starlette's own cap answers plain
text). A body with a Content-Length over the cap is refused before it is read; a chunked one is cut
off once it passes the cap. A body that stops arriving for `body_timeout_s` answers 408."""

from __future__ import annotations

import asyncio

from starlette.exceptions import HTTPException

from ..wire.errors import APIError


def _too_large(limit: int) -> str:
    return f"the request body is larger than {limit} bytes"


class BodyLimit:
    def __init__(self, app, max_bytes: int, body_timeout_s: float | None = None):
        self.app, self.max_bytes, self.body_timeout_s = app, max_bytes, body_timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_bytes:
            response = APIError(413, _too_large(self.max_bytes)).response()
            return await response(scope, receive, send)
        seen, body_done = 0, False

        async def limited_receive():
            nonlocal seen, body_done
            if body_done or self.body_timeout_s is None:
                message = await receive()  # after the body: only a disconnect is left to wait for
            else:
                try:
                    message = await asyncio.wait_for(receive(), self.body_timeout_s)
                except asyncio.TimeoutError:
                    raise HTTPException(
                        408, f"the request body stopped arriving for {self.body_timeout_s:g} s"
                    ) from None
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # An HTTPException passes through FastAPI's body reading to the error handlers.
                    raise HTTPException(413, _too_large(self.max_bytes))
            return message

        await self.app(scope, limited_receive, send)
