"""HTTP errors and the handlers that render every failure as ``{"error": {code, message}}``.

The tree::

    ApiError
    ├── BadRequest             400  malformed JSON, bad query parameter
    ├── Unauthorized           401  missing or wrong credentials
    ├── Forbidden              403  valid credentials, wrong role
    ├── NotFound               404  unknown id, or another tenant's
    ├── Conflict               409  state conflict, idempotency key in flight
    ├── PayloadTooLarge        413
    ├── UnsupportedMediaType   415
    ├── Unprocessable          422  well-formed JSON that fails validation
    └── ServiceUnavailable     503  the database is unreachable

Unexpected exceptions become a 500 with the same shape and no trace; the
trace goes to the log.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from outbox.db import TRANSIENT_ERRORS
from outbox.errors import DatabaseUnavailable

log = logging.getLogger("hookrelay.api")


class ApiError(Exception):
    status = 500
    code = "internal_error"

    def __init__(
        self, message: str, *, code: str | None = None, extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.extra = extra or {}
        self.headers = headers


class BadRequest(ApiError):
    status, code = 400, "bad_request"


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class NotFound(ApiError):
    status, code = 404, "not_found"


class Conflict(ApiError):
    status, code = 409, "conflict"


class PayloadTooLarge(ApiError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(ApiError):
    status, code = 415, "unsupported_media_type"


class Unprocessable(ApiError):
    status, code = 422, "validation_error"


class ServiceUnavailable(ApiError):
    status, code = 503, "unavailable"


def error_response(
    status: int, code: str, message: str, *, extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"error": {"code": code, "message": message}}
    body.update(extra or {})
    return JSONResponse(body, status_code=status, headers=headers)


async def on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    headers = dict(exc.headers or {})
    if exc.status == 401:
        headers.setdefault("WWW-Authenticate", "Bearer")
    return error_response(exc.status, exc.code, exc.message, extra=exc.extra, headers=headers)


async def on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    codes = {404: "not_found", 405: "method_not_allowed"}
    return error_response(
        exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail),
        headers=dict(exc.headers or {}),
    )


async def on_unavailable(request: Request, exc: Exception) -> Response:
    log.warning("database unavailable: %s", exc)
    return error_response(
        503, "unavailable", "the database is unavailable; retry shortly",
        headers={"Retry-After": "1"},
    )


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal_error", "internal server error")


HANDLERS: dict[Any, Any] = {
    ApiError: on_api_error,
    HTTPException: on_http_exception,
    DatabaseUnavailable: on_unavailable,
    # Whatever asyncpg raises while the server is down, restarting or full.
    **dict.fromkeys(TRANSIENT_ERRORS, on_unavailable),
    Exception: on_unexpected,
}
