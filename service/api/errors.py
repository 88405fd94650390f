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

Errors of ``outbox`` become HTTP answers through one table, ``OUTBOX_ANSWERS``;
routes let them propagate. A database error nothing maps (a statement the server
refused for its own reasons, a pooler that lost a prepared statement) is a 503 with
``Retry-After``: the request may well succeed again, and the client gets an answer
instead of a dropped connection. Unexpected exceptions become a 500 with the same
shape and no trace; the trace goes to the log. :func:`render` picks the handler for
any exception, as Starlette does for the routes it serves.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from hookrelay.outbox.errors import (
    AlreadyPending,
    AlreadyReplayed,
    DatabaseUnavailable,
    DeadLetterNotFound,
    IdempotencyInFlight,
    IdempotencyKeyReused,
    InvalidTransition,
    LocalFault,
    NotTerminal,
    OutboxError,
    ProgressBackwards,
    TaskNotFound,
    TenantNotFound,
    TestEventNotFound,
)
from hookrelay.outbox.store import TRANSIENT_ERRORS

log = logging.getLogger("hookrelay.api")


class ApiError(Exception):
    status = 500
    code = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        extra: dict[str, Any] | None = None,
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
    status: int,
    code: str,
    message: str,
    *,
    extra: dict[str, Any] | None = None,
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
        exc.status_code,
        codes.get(exc.status_code, "http_error"),
        str(exc.detail),
        headers=dict(exc.headers or {}),
    )


async def on_unavailable(request: Request, exc: Exception) -> Response:
    log.warning("database unavailable: %s", exc)
    return error_response(
        503,
        "unavailable",
        "the database is unavailable; retry shortly",
        headers={"Retry-After": "1"},
    )


async def on_database_error(request: Request, exc: Exception) -> Response:
    # The class and the server's message only: a statement's arguments may hold secrets.
    log.error(
        "database error on %s %s: %s: %s",
        request.method,
        request.url.path,
        type(exc).__name__,
        exc,
    )
    return error_response(
        503,
        "unavailable",
        "the database could not complete the request; retry shortly",
        headers={"Retry-After": "1"},
    )


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal_error", "internal server error")


@dataclass(frozen=True, slots=True)
class Answer:
    """How one outbox error is shown: status, code, message (None: the error's own)."""

    status: int
    code: str
    message: Callable[[Any], str] | str | None = None
    with_task: bool = False  # add the task as it is now (InvalidTransition.current)
    headers: dict[str, str] | None = None


def _transition_message(exc: InvalidTransition) -> str:
    return f"task is {exc.current.status}; that transition is not allowed"


# The most specific class wins (looked up along the exception's MRO).
OUTBOX_ANSWERS: dict[type[OutboxError], Answer] = {
    TaskNotFound: Answer(404, "not_found", "task not found"),
    TenantNotFound: Answer(404, "not_found", "tenant not found"),
    TestEventNotFound: Answer(404, "not_found", "test event not found"),
    DeadLetterNotFound: Answer(404, "not_found", "dead letter not found"),
    AlreadyReplayed: Answer(409, "already_replayed", "this dead letter was already replayed"),
    IdempotencyKeyReused: Answer(422, "idempotency_key_reused"),
    IdempotencyInFlight: Answer(409, "idempotency_in_flight", headers={"Retry-After": "1"}),
    InvalidTransition: Answer(409, "invalid_transition", _transition_message, with_task=True),
    NotTerminal: Answer(409, "not_terminal", "the task has no terminal event yet", with_task=True),
    ProgressBackwards: Answer(
        409, "progress_backwards", "progress never goes backwards", with_task=True
    ),
    AlreadyPending: Answer(
        409, "delivery_pending", "the event is already waiting for delivery", with_task=True
    ),
    # Our own resolver failed checking a callback host: the request may be fine.
    LocalFault: Answer(
        503,
        "unavailable",
        "the callback host could not be checked (our DNS resolver is unavailable); retry shortly",
        headers={"Retry-After": "1"},
    ),
}


def answer_for(exc: OutboxError) -> Answer | None:
    for cls in type(exc).__mro__:
        found = OUTBOX_ANSWERS.get(cls)
        if found is not None:
            return found
    return None


async def on_outbox_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OutboxError)
    found = answer_for(exc)
    if found is None:  # an outbox error no request should meet: a bug, not bad input
        return await on_unexpected(request, exc)
    message = found.message
    text = message(exc) if callable(message) else message if message is not None else str(exc)
    extra = None
    if found.with_task and isinstance(exc, InvalidTransition):
        extra = {"task": exc.current.to_resource()}
    return error_response(found.status, found.code, text, extra=extra, headers=found.headers)


HANDLERS: dict[Any, Any] = {
    ApiError: on_api_error,
    HTTPException: on_http_exception,
    DatabaseUnavailable: on_unavailable,
    OutboxError: on_outbox_error,
    # Whatever asyncpg raises while the server is down, restarting or full.
    **dict.fromkeys(TRANSIENT_ERRORS, on_unavailable),
    # Any other error of the server or the driver that no answer above names.
    asyncpg.PostgresError: on_database_error,
    Exception: on_unexpected,
}


def render(request: Request, exc: Exception) -> Awaitable[Response]:
    """The answer to ``exc`` from the most specific handler of :data:`HANDLERS`."""
    for cls in type(exc).__mro__:
        handler = HANDLERS.get(cls)
        if handler is not None:
            answer: Awaitable[Response] = handler(request, exc)
            return answer
    return on_unexpected(request, exc)  # pragma: no cover - Exception is in HANDLERS
