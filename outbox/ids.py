"""Identifiers: a short type prefix and 130 random bits in lowercase base32.

Ids are unguessable on purpose (a task id is a capability to read status, with
the tenant check behind it), so they carry no timestamp or counter.
"""

from __future__ import annotations

import secrets

# Lowercase base32 (RFC 4648's alphabet), two characters (10 bits) per lookup: a task
# and an event id are made on every submit and complete, and base64.b32encode's
# pure-Python loop took twice as long.
_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
_PAIRS = tuple(a + b for a in _ALPHABET for b in _ALPHABET)
_SHIFTS = tuple(range(120, -1, -10))


def _token() -> str:
    # 130 random bits -> 26 base32 chars: the first 26 characters of
    # base64.b32encode(17 random bytes), lowercased, as ids always were.
    bits = int.from_bytes(secrets.token_bytes(17), "big") >> 6
    return "".join([_PAIRS[(bits >> shift) & 1023] for shift in _SHIFTS])


def task_id() -> str:
    return "task_" + _token()


def event_id() -> str:
    return "evt_" + _token()


def tenant_id() -> str:
    return "ten_" + _token()


def portal_token() -> str:
    """A portal link's secret: 256 random bits (only its SHA-256 is stored)."""
    return "hrp_" + secrets.token_urlsafe(32)


def api_key() -> str:
    """A partner API key: 256 random bits, URL-safe."""
    return "hr_" + secrets.token_urlsafe(32)


def lease_owner(prefix: str = "dispatcher") -> str:
    return f"{prefix}-{secrets.token_hex(4)}"
