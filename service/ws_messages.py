"""The messages of ``GET /v1/ws``: what a client may send, what the server sends, close codes.

Every message is one JSON object in a text frame with a ``type``. A message the
server cannot use is answered with ``{"type": "error", "code", "message"}`` and
the socket stays open; a binary frame, or more than :data:`MAX_BAD_MESSAGES`
bad messages on one socket, closes it with :data:`CLOSE_BAD_MESSAGES`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hookrelay.service.api.errors import BadRequest, Unprocessable
from hookrelay.service.api.request_guard import check_json, finite_float

# Close codes. 4000-4999 are the application's own (RFC 6455, 7.4.2); the HTTP
# status each mirrors is its last three digits, so they read like the API's.
CLOSE_BAD_MESSAGES = 4400  # binary frames, or too many malformed messages
CLOSE_UNAUTHORIZED = 4401  # no auth message in time, or a wrong token
CLOSE_FORBIDDEN = 4403  # the admin token: streams are a tenant's
CLOSE_TOO_MANY_STREAMS = 4429  # the tenant's open-stream cap (SSE and WebSocket together)
CLOSE_SLOW_CONSUMER = 4008  # fell too far behind; reconnect and resume
CLOSE_RESTART = 1012  # the server is stopping; reconnect (to another process) and resume
CLOSE_UNAVAILABLE = 1013  # the database could not check the key; try again later
# uvicorn closes with 1011 when a protocol ping goes unanswered and with 1009 when a
# message exceeds the size cap.

MAX_BAD_MESSAGES = 10
MAX_TASK_ID_CHARS = 64


@dataclass(frozen=True, slots=True)
class Auth:
    token: str


@dataclass(frozen=True, slots=True)
class Subscribe:
    """``taskIds`` to follow, or ``all`` of the tenant's tasks."""

    task_ids: tuple[str, ...] = ()
    all: bool = False


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """Stop following ``taskIds`` (a socket following all its tenant's tasks reconnects)."""

    task_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Resume:
    """Replay every change after sequence ``after``, then go on live."""

    after: int


@dataclass(frozen=True, slots=True)
class Ping:
    pass


Message = Auth | Subscribe | Unsubscribe | Resume | Ping
FIELDS: dict[str, set[str]] = {
    "auth": {"token"},
    "subscribe": {"taskIds", "all"},
    "unsubscribe": {"taskIds"},
    "resume": {"after"},
    "ping": set(),
    "pong": set(),
}


def _task_ids(data: dict[str, Any]) -> tuple[tuple[str, ...], bool]:
    everything = data.get("all", False)
    ids = data.get("taskIds")
    if not isinstance(everything, bool):
        raise Unprocessable("all must be true or false", code="invalid_message")
    if everything == (ids is not None):
        raise Unprocessable("give either taskIds or all: true", code="invalid_message")
    if ids is None:
        return (), True
    if not isinstance(ids, list) or not ids:
        raise Unprocessable("taskIds must be a non-empty array", code="invalid_message")
    for task_id in ids:
        if not isinstance(task_id, str) or not 0 < len(task_id) <= MAX_TASK_ID_CHARS:
            raise Unprocessable(
                f"each task id is a string of 1 to {MAX_TASK_ID_CHARS} characters",
                code="invalid_message",
            )
    return tuple(dict.fromkeys(ids)), False  # duplicates once, order kept


def parse(text: str) -> Message | None:
    """The client's message; None for a ``pong`` (nothing to do). Raises ``ApiError``."""
    try:
        data = json.loads(text, parse_float=finite_float, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"not JSON: {str(exc)[:80]}", code="invalid_json") from None
    check_json(data, "message")
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise Unprocessable('a message is a JSON object with a "type"', code="invalid_message")
    kind = data["type"]
    if kind not in FIELDS:
        raise Unprocessable(
            f"unknown message type {kind[:40]!r}; expected one of {', '.join(FIELDS)}",
            code="invalid_message",
        )
    unknown = sorted(set(data) - FIELDS[kind] - {"type"})
    if unknown:
        raise Unprocessable(f"unknown field(s): {', '.join(unknown)[:200]}", code="invalid_message")
    if kind == "auth":
        token = data.get("token")
        if not isinstance(token, str) or not token:
            raise Unprocessable("token must be a non-empty string", code="invalid_message")
        return Auth(token)
    if kind == "subscribe":
        ids, everything = _task_ids(data)
        return Subscribe(ids, everything)
    if kind == "unsubscribe":
        return Unsubscribe(_task_ids(data)[0])
    if kind == "resume":
        after = data.get("after")
        if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after < 2**63:
            raise Unprocessable("after must be a non-negative integer", code="invalid_message")
        return Resume(after)
    return Ping() if kind == "ping" else None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def encode(kind: str, **fields: Any) -> str:
    """A server message: ``{"type": kind, **fields}``."""
    return json.dumps({"type": kind, **fields}, separators=(",", ":"))


def error(code: str, message: str, **fields: Any) -> str:
    return encode("error", code=code, message=message, **fields)
