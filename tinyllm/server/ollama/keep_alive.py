"""Ollama's `keep_alive`: how long a model stays loaded after a request, as a number of seconds or a Go
duration ("5m", "1h30m", "90s", "-1"); a negative value keeps it loaded for good, 0 unloads it at once."""

from __future__ import annotations

import math
import re

from ..wire.client_text import clip
from ..wire.errors import bad_request

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
UNSET = object()  # the request did not send keep_alive


def keep_alive_seconds(value) -> float | None:
    """Seconds (None: for good) from what a request sent; a 400 naming the value otherwise."""
    if isinstance(value, bool):
        raise _bad(value)
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise _bad(value)
        return None if value < 0 else float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return keep_alive_seconds(float(text))  # "300", "-1": seconds as Ollama reads a bare number
        except ValueError:
            pass
        sign, body = (-1, text[1:]) if text[:1] == "-" else (1, text.removeprefix("+"))
        parts = _PART.findall(body)
        if body and "".join(n + u for n, u in parts) == body:
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
            return None if sign < 0 and seconds > 0 else seconds
    raise _bad(value)


def _bad(value):
    return bad_request(
        'keep_alive: must be a duration such as "5m" or "1h30m" or a finite number of seconds (negative: keep '
        f"the model loaded), got {clip(repr(value))}",
        "keep_alive",
    )
