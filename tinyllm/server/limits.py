"""A cap on request body size that answers in OpenAI's error shape (Starlette's own cap answers plain
text). A body with a Content-Length over the cap is refused before it is read; a chunked one is cut
off once it passes the cap."""
from __future__ import annotations

from starlette.exceptions import HTTPException

from .errors import APIError


def _too_large(limit: int) -> str:
    return f"the request body is larger than {limit} bytes"


class BodyLimit:
    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_bytes:
            response = APIError(413, _too_large(self.max_bytes)).response()
            return await response(scope, receive, send)
        seen = 0

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # An HTTPException passes through FastAPI's body reading to the error handlers.
                    raise HTTPException(413, _too_large(self.max_bytes))
            return message

        await self.app(scope, limited_receive, send)
