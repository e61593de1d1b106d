"""The Origin guard, against web pages that drive a local server from a visitor's browser.

A page on another origin can send a POST without asking first (a CORS "simple request": a form's content type
such as text/plain, or none), and a browser always names the page's origin in the `Origin` header of a
cross-origin request. So a state-changing request whose Origin is neither the server's own (the chat page's,
same host and port as the Host header) nor one allowed by `--allowed-origins` gets a 403 before any route reads
it. A request with no Origin (curl, the SDKs, Ollama's clients, scripts) is not from a page and passes, whatever
its content type: `curl -d '{...}'` sends a form's type with a JSON body, and litellm sends none.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from ..wire.client_text import clip
from ..wire.errors import APIError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # change nothing; a page cannot read their answers


class OriginGuard:
    """ASGI middleware: a request that is not a safe method and names an Origin it does not allow gets 403."""

    def __init__(self, app, allowed: Sequence[str] = ()):
        self.app = app
        self.any = "*" in allowed
        self.allowed = frozenset(o.rstrip("/").lower() for o in allowed if o != "*")

    def is_allowed(self, origin: str, host: str) -> bool:
        origin = origin.strip().rstrip("/").lower()
        if self.any or origin in self.allowed:
            return True
        parts = urlsplit(origin)  # "null" (a file or a sandboxed frame) has no host and is refused
        return parts.scheme in ("http", "https") and bool(parts.netloc) and parts.netloc == host.strip().lower()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        origin = headers.get(b"origin")
        host = headers.get(b"host", b"").decode("latin-1")
        if origin is not None and not self.is_allowed(origin.decode("latin-1"), host):
            message = (
                f"requests from the web page at {clip(origin.decode('latin-1'), 100)!r} are not allowed; "
                "start the server with --allowed-origins naming that origin to allow it"
            )
            return await APIError(403, message, code="origin_not_allowed").response()(scope, receive, send)
        await self.app(scope, receive, send)
