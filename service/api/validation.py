"""Shapes of request bodies and query parameters, checked field by field."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from datetime import datetime
from typing import Any

from hookrelay.outbox.egress import AddressPolicy, Resolver
from hookrelay.outbox.models import TERMINAL_STATUSES, TerminalStatus
from hookrelay.outbox.tasks import Cursor, NewTask, check_progress
from hookrelay.service.api import request_guard as guard
from hookrelay.service.api.callback_url import check_callback_url
from hookrelay.service.api.errors import BadRequest, Unprocessable

# Matched with fullmatch: "$" would let a trailing newline through.
TYPE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}")
IDEMPOTENCY_KEY_RE = re.compile(r"[\x21-\x7e]{1,255}")
MAX_METADATA_BYTES = 16_384
MAX_TIMEOUT_S = 30 * 86400
SUBMIT_FIELDS = {
    "type",
    "input",
    "callbackUrl",
    "metadata",
    "timeoutSeconds",
    "heartbeatTimeoutSeconds",
    "onTimeout",
}
PROGRESS_FIELDS = {"percent", "message"}
ON_TIMEOUT_FIELDS = {"result", "error"}
COMPLETE_FIELDS = {"status", "result", "error"}


def canonical_hash(body: Any) -> bytes:
    """Hash of a JSON value independent of key order and whitespace."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).digest()


def _object(body: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise Unprocessable("the request body must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise Unprocessable(f"unknown field(s): {', '.join(unknown)}")
    return body


async def new_task(body: Any, policy: AddressPolicy, resolver: Resolver) -> NewTask:
    data = _object(body, SUBMIT_FIELDS)
    task_type = data.get("type")
    if not isinstance(task_type, str) or not TYPE_RE.fullmatch(task_type):
        raise Unprocessable("type is required: 1-100 chars of letters, digits and ._:/-")
    callback_url = await check_callback_url(data.get("callbackUrl"), policy, resolver)
    metadata = data.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise Unprocessable("metadata must be a JSON object")
        if len(json.dumps(metadata).encode()) > MAX_METADATA_BYTES:
            raise Unprocessable(f"metadata exceeds {MAX_METADATA_BYTES} bytes")
    timeout = data.get("timeoutSeconds")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout <= MAX_TIMEOUT_S
    ):
        raise Unprocessable(f"timeoutSeconds must be a number in (0, {MAX_TIMEOUT_S}]")
    heartbeat = data.get("heartbeatTimeoutSeconds")
    if heartbeat is not None and (
        isinstance(heartbeat, bool)
        or not isinstance(heartbeat, int | float)
        or not 1 <= heartbeat <= MAX_TIMEOUT_S
    ):
        raise Unprocessable(f"heartbeatTimeoutSeconds must be a number in [1, {MAX_TIMEOUT_S}]")
    on_timeout = data.get("onTimeout")
    if on_timeout is not None:
        if not isinstance(on_timeout, dict) or set(on_timeout) - ON_TIMEOUT_FIELDS:
            raise Unprocessable("onTimeout must be an object with only result and/or error")
        if len(json.dumps(on_timeout).encode()) > MAX_METADATA_BYTES:
            raise Unprocessable(f"onTimeout exceeds {MAX_METADATA_BYTES} bytes")
    return NewTask(
        type=task_type,
        callback_url=callback_url,
        input=data.get("input"),
        metadata=metadata,
        timeout_s=float(timeout) if timeout is not None else None,
        heartbeat_timeout_s=float(heartbeat) if heartbeat is not None else None,
        on_timeout=on_timeout,
    )


def completion(body: Any) -> tuple[TerminalStatus, Any, Any]:
    data = _object(body, COMPLETE_FIELDS)
    status = data.get("status")
    if status not in TERMINAL_STATUSES:
        raise Unprocessable(f"status must be one of: {', '.join(TERMINAL_STATUSES)}")
    return status, data.get("result"), data.get("error")


def idempotency_key(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not IDEMPOTENCY_KEY_RE.fullmatch(raw):
        raise BadRequest("Idempotency-Key must be 1-255 printable ASCII characters")
    return raw


def timestamp(name: str, raw: str | None) -> datetime | None:
    return None if raw is None else guard.timestamp(name, raw)


MAX_WAIT_S = 30.0


def wait_seconds(raw: str | None) -> float:
    """``?wait=N`` for long polling: 0 < N <= 30 seconds."""
    if raw is None:
        return 0.0
    return guard.ascii_number("wait", raw, 0.0, MAX_WAIT_S)


def limit(raw: str | None, *, default: int = 100, maximum: int = 1000) -> int:
    return default if raw is None else guard.ascii_int("limit", raw, 1, maximum)


MAX_CURSOR_CHARS = 512


def encode_cursor(cursor: Cursor | None) -> str | None:
    if cursor is None:
        return None
    raw = json.dumps([cursor.updated_at.isoformat(), cursor.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(raw: str | None) -> Cursor | None:
    if raw is None:
        return None
    invalid = BadRequest("cursor is invalid; pass back nextCursor unchanged")
    # Ours are ~80 characters; a long one is not ours, and nested brackets in it
    # would exhaust the recursion limit of json.loads.
    if len(raw) > MAX_CURSOR_CHARS:
        raise invalid
    try:
        ts, ident = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        if not isinstance(ts, str) or not isinstance(ident, str) or guard.text_problem(ident):
            raise invalid
        return Cursor(guard.timestamp("cursor", ts), ident)
    except (ValueError, TypeError, binascii.Error, RecursionError, BadRequest) as exc:
        raise invalid from exc


def progress(body: Any) -> tuple[float, str | None]:
    """``{percent: 0-100, message?}`` of a progress report."""
    data = _object(body, PROGRESS_FIELDS)
    try:
        return check_progress(data.get("percent"), data.get("message"))
    except ValueError as exc:
        raise Unprocessable(str(exc)) from exc


PING_FIELDS = {"callbackUrl"}


async def ping_target(body: Any, policy: AddressPolicy, resolver: Resolver) -> str:
    """The callback URL of ``POST /v1/test-events``, checked like a task's (422 if refused)."""
    data = _object(body, PING_FIELDS)
    return await check_callback_url(data.get("callbackUrl"), policy, resolver)
