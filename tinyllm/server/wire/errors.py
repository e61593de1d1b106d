"""Errors in OpenAI's shape: every failure answers {"error": {"message", "type", "param", "code"}}.

Clients (the official SDKs among them) map the HTTP status to an exception class and read
`error.message`, so every path out of the server, FastAPI's own included, goes through here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("tinyllm.server")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    500: "server_error",
    503: "service_unavailable",
}


class APIError(Exception):
    """A failure to report to the client; raising it anywhere in a handler answers `status`."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = {"WWW-Authenticate": "Bearer"} if status == 401 else dict(headers or {})
        self.type = type or _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers or None)


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param=param)


@contextmanager
def nesting_is_400() -> Iterator[None]:
    """Around a request's preparation (checks, conversions, compiling, rendering): recursive code meeting a
    structure deeper than it can follow is the request's fault, a 400, not the server's."""
    try:
        yield
    except RecursionError:
        raise bad_request("the request nests too deeply to be processed") from None


def _param_of(loc: tuple) -> str | None:
    """The request field a validation error is about: loc is ("body", field, ...) for a JSON body."""
    parts = [p for p in loc[1:] if isinstance(p, str)] if loc and loc[0] == "body" else []
    return parts[0] if parts else None


def validation_error(exc: RequestValidationError) -> APIError:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        return bad_request(f"the request body is not valid JSON ({first.get('ctx', {}).get('error', 'parse error')})")
    param = _param_of(loc)
    if len(loc) == 1 and loc[0] == "body":  # missing, or not an object (e.g. no JSON content type)
        return bad_request(
            f"the request body must be a JSON object sent as application/json ({first.get('msg', 'invalid body')})"
        )
    where = ".".join(str(p) for p in loc[1:]) or "body"
    more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
    return bad_request(f"{where}: {first.get('msg', 'invalid value')}{more}", param)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError):
        return exc.response()

    # FastAPI answers 422 in its own shape; OpenAI clients expect 400 with an error object.
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError):
        return validation_error(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException):
        code = "not_found" if exc.status_code == 404 else None
        return APIError(exc.status_code, str(exc.detail), code=code).response()

    # Last resort: a bug answers 500 with the error object; uvicorn keeps serving.
    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception):
        log.exception("unhandled error while serving a request", exc_info=exc)
        return APIError(500, f"internal server error ({type(exc).__name__})").response()
