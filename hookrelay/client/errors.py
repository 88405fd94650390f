"""The client's exceptions, one tree over the API's ``{"error": {"code", "message"}}``.

The tree::

    HookrelayError
    ├── TransportError        no answer: refused, reset, timed out (after the retries)
    ├── WaitTimeout           wait() ran out of time; .task is the last state seen
    └── ApiError              an error answer; .status, .code, .message
        ├── InvalidRequest    400, 413, 415, 422; .field names what was refused, if known
        ├── Unauthorized      401: no API key or admin token, or a wrong one
        ├── Forbidden         403: a valid credential of the wrong role
        ├── NotFound          404: unknown id, or another tenant's
        ├── Conflict          409; .task is the task as it is now, when the server sent it
        ├── RateLimited       429; .retry_after in seconds
        └── ServerError       5xx; .retry_after when the server gave one

Messages are the server's; credentials never appear in them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import httpx

from hookrelay.models import Task

__all__ = [
    "ApiError",
    "Conflict",
    "Forbidden",
    "HookrelayError",
    "InvalidRequest",
    "NotFound",
    "RateLimited",
    "ServerError",
    "TransportError",
    "Unauthorized",
    "WaitTimeout",
    "from_response",
]


class HookrelayError(Exception):
    """Every error the client raises."""


class TransportError(HookrelayError):
    """The server could not be reached, or its answer was lost."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        # False: the request certainly never reached the server (refused, no connection).
        self.sent = sent


class WaitTimeout(HookrelayError):
    """The task was not terminal before the timeout; ``task`` is the last state seen."""

    def __init__(self, task: Task | None, timeout: float) -> None:
        state = task.status if task is not None else "unknown (the server did not answer)"
        super().__init__(f"task not terminal after {timeout:g} s: {state}")
        self.task = task


class ApiError(HookrelayError):
    """The server answered with an error status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        retry_after: float | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.retry_after = retry_after
        self.body: Mapping[str, Any] = body or {}
        self.attempts = 1  # how many times the request was sent (set by the client)


class InvalidRequest(ApiError):
    """The request was refused as malformed or invalid (400, 413, 415, 422)."""

    @property
    def field(self) -> str | None:
        """The field or parameter the message is about (its first word), if it names one."""
        found = _FIELD.match(self.message)
        name = found.group(1).removeprefix("body.") if found else None
        return None if name is None or name in _NOT_FIELDS else name


class Unauthorized(ApiError):
    """401: no credential, or a wrong one."""


class Forbidden(ApiError):
    """403: a valid credential that may not do this (a tenant key on an admin route)."""


class NotFound(ApiError):
    """404: no such task (or event, tenant), or another tenant's."""


class Conflict(ApiError):
    """409: the task's state does not allow it; ``task`` is the task as it is now."""

    @property
    def task(self) -> Task | None:
        found = self.body.get("task")
        return Task.from_json(found) if isinstance(found, Mapping) else None


class RateLimited(ApiError):
    """429: too many requests or streams; ask again after ``retry_after`` seconds."""


class ServerError(ApiError):
    """5xx: the server failed or its database is unavailable."""


# The server's messages start with the name of what they refuse: "callbackUrl
# refused: ...", "limit must be an integer ...", "body.input contains a NUL ...".
_FIELD = re.compile(r"(?:unknown field\(s\): )?([A-Za-z][A-Za-z0-9_.\[\]-]*)\b")
_NOT_FIELDS = frozenset({"a", "the", "body", "request", "malformed", "send", "JSON", "header"})
_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    415: InvalidRequest,
    422: InvalidRequest,
    429: RateLimited,
}


def retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (the delay form; a date is not used by hookrelay)."""
    raw = response.headers.get("retry-after", "").strip()
    try:
        return max(0.0, float(raw)) if raw else None
    except ValueError:
        return None


def from_response(response: httpx.Response) -> ApiError:
    """The error for an answer of status 400 or more (its body already read)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code, message = str(error.get("code", "")), str(error.get("message", ""))
    else:  # not hookrelay's shape: a proxy in between, say
        code, message = "http_error", response.reason_phrase or f"HTTP {response.status_code}"
    status = response.status_code
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return cls(
        status,
        code,
        message,
        retry_after=retry_after(response),
        body=body if isinstance(body, dict) else None,
    )
