"""What is checked beyond the shapes: the idempotency key, timestamps, opaque cursors."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from datetime import datetime

import msgspec

from hookrelay.outbox.tasks import Cursor
from hookrelay.service.api import request_guard as guard
from hookrelay.service.api.errors import BadRequest
from hookrelay.service.api.shapes import IDEMPOTENCY_KEY_PATTERN, MAX_CURSOR

_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


def canonical_hash(body: msgspec.Struct) -> bytes:
    """Hash of a decoded body, the same whatever the key order and whitespace sent."""
    return hashlib.sha256(msgspec.json.encode(body, order="sorted")).digest()


def idempotency_key(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not _IDEMPOTENCY_KEY.fullmatch(raw):
        raise BadRequest("Idempotency-Key must be 1-255 printable ASCII characters")
    return raw


def timestamp(name: str, raw: str | None) -> datetime | None:
    return None if raw is None else guard.timestamp(name, raw)


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
    if len(raw) > MAX_CURSOR:
        raise invalid
    try:
        ts, ident = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        if not isinstance(ts, str) or not isinstance(ident, str) or guard.text_problem(ident):
            raise invalid
        return Cursor(guard.timestamp("cursor", ts), ident)
    except (ValueError, TypeError, binascii.Error, RecursionError, BadRequest) as exc:
        raise invalid from exc
