"""The chat page: GET / answers static/chat.html, whose script and style come from /chat/ — all served from the
package, nothing from elsewhere (no CDN, no build step). The page talks to /v1/chat/completions like any client,
with the API key the user types when the server asks for one, so the page itself needs no key.

Its Content-Security-Policy lets the page run only its own script and connect only to this server; the page
never turns model text into HTML (markdown.js builds DOM nodes), and the policy is the second fence.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import Response

ASSETS = {  # URL path -> (file in static/, media type)
    "/": ("chat.html", "text/html; charset=utf-8"),
    "/chat/chat.js": ("chat.js", "text/javascript; charset=utf-8"),
    "/chat/markdown.js": ("markdown.js", "text/javascript; charset=utf-8"),
    "/chat/chat.css": ("chat.css", "text/css; charset=utf-8"),
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _handler(body: bytes, media_type: str):
    async def asset() -> Response:  # no parameters: nothing of the request reaches the answer
        return Response(body, media_type=media_type, headers=HEADERS)

    return asset


def add_chat_page(app: FastAPI) -> None:
    static = files("tinyllm.server") / "static"
    for path, (name, media_type) in ASSETS.items():
        # HEAD too: Ollama's clients check that a server is up with HEAD /
        app.add_api_route(
            path, _handler((static / name).read_bytes(), media_type), methods=["GET", "HEAD"], include_in_schema=False
        )
