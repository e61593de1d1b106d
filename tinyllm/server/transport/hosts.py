"""The Host header allow-list, against DNS rebinding: a web page whose name an attacker points at 127.0.0.1
reaches a local server from the victim's browser, same-origin, but its requests still carry the attacker's
name in Host. A server bound to a loopback address answers only to the loopback names by default
(`tinyllm serve --allowed-hosts` names others); one bound elsewhere answers to any name unless told.

An entry is a host name or address (`example.com`, `10.0.0.5`, `[::1]`), which matches it on any port, or one
with a port (`example.com:8000`), which matches that port only; `*` matches every host.
"""

from __future__ import annotations

import ipaddress

from ..wire.client_text import clip
from ..wire.errors import APIError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def is_loopback(bind_host: str) -> bool:
    if bind_host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind_host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_allowed_hosts(bind_host: str) -> tuple[str, ...] | None:
    """The loopback names when bound to a loopback address; None (any host) otherwise."""
    return LOOPBACK_NAMES if is_loopback(bind_host) else None


def parse_allowed_hosts(text: str) -> tuple[str, ...]:
    """`a,b:8000,[::1]` as its entries; a 'ValueError' naming an entry that is no host name."""
    entries = tuple(e.strip().lower() for e in text.split(","))
    for entry in entries:
        if not entry or any(c.isspace() or c in "/@?#" for c in entry):
            raise ValueError(f"--allowed-hosts entry {entry!r} is not a host name, address or host:port")
    return entries


def _split(host: str) -> tuple[str, str | None]:
    """'name:port', '[v6]:port' or 'name' as (name, port or None)."""
    if host.startswith("["):
        name, _, rest = host.partition("]")
        return name + "]", rest[1:] if rest.startswith(":") else None
    name, sep, port = host.rpartition(":")
    return (name, port) if sep else (host, None)


class HostAllowList:
    """ASGI middleware: a request whose Host header is not allowed gets 400 before any route sees it."""

    def __init__(self, app, allowed: tuple[str, ...]):
        self.app = app
        self.any = "*" in allowed
        self.allowed = {_split(e) for e in allowed if e != "*"}

    def is_allowed(self, host: str) -> bool:
        if self.any:
            return True
        name, port = _split(host.strip().lower())
        return (name, None) in self.allowed or (port is not None and (name, port) in self.allowed)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
        if not self.is_allowed(host):
            message = (
                f"the Host header {clip(host, 100)!r} is not one this server answers to; "
                "start it with --allowed-hosts naming it to allow it"
            )
            return await APIError(400, message, code="host_not_allowed").response()(scope, receive, send)
        await self.app(scope, receive, send)
