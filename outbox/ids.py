"""Identifiers: a short type prefix and 130 random bits in lowercase base32.

Ids are unguessable on purpose (a task id is a capability to read status, with
the tenant check behind it), so they carry no timestamp or counter.
"""

from __future__ import annotations

import base64
import secrets


def _token() -> str:
    # 17 random bytes -> 28 base32 chars; the first 26 hold 130 bits.
    return base64.b32encode(secrets.token_bytes(17)).decode("ascii")[:26].lower()


def task_id() -> str:
    return "task_" + _token()


def event_id() -> str:
    return "evt_" + _token()


def tenant_id() -> str:
    return "ten_" + _token()


def api_key() -> str:
    """A partner API key: 256 random bits, URL-safe."""
    return "hr_" + secrets.token_urlsafe(32)


def lease_owner(prefix: str = "dispatcher") -> str:
    return f"{prefix}-{secrets.token_hex(4)}"
