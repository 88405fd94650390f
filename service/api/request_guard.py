"""The request-parsing layer: what PostgreSQL and JSON cannot hold never reaches a route.

PostgreSQL ``text`` refuses NUL, UTF-8 cannot carry a lone surrogate, JSON has no
infinities, ``timestamptz`` has a range, ``int()`` reads '²' and '١' as digits, and a
deeply nested cursor exhausts the recursion limit. Each of these was a 500. Every
check lives here, for path and query (``GuardMiddleware``, before routing), headers,
JSON bodies (:func:`check_json`) and the typed query values (:func:`ascii_int`,
:func:`timestamp`), so a new route inherits them.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Receive, Scope, Send

from hookrelay.service.api.errors import BadRequest, Unprocessable, error_response

MAX_DEPTH = 32
_INT = re.compile(r"[0-9]{1,18}")
# ISO-8601 as the API documents it: ASCII digits, a time, and a zone.
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
    r"([Zz]|[+-][0-9]{2}:?[0-9]{2})"
)


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as PostgreSQL text, or None."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate"
    return None


def finite_float(raw: str) -> float:
    """``parse_float`` for ``json.loads``: 1e400 would be infinity, which JSON cannot hold."""
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError(f"number {raw[:40]} is out of range")
    return value


def check_json(value: Any, where: str = "body", depth: int = 0) -> None:
    """Refuse (422) strings PostgreSQL cannot store, keys included, and over-deep nesting."""
    if depth > MAX_DEPTH:
        raise BadRequest(f"JSON nested deeper than {MAX_DEPTH} levels", code="invalid_json")
    if isinstance(value, str):
        problem = text_problem(value)
        if problem is not None:
            raise Unprocessable(f"{where} {problem}", code="unsupported_value")
    elif isinstance(value, float) and not math.isfinite(value):
        raise Unprocessable(f"{where} is not a finite number", code="unsupported_value")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_json(key, f"{where} key", depth + 1)
            check_json(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_json(item, f"{where}[{i}]", depth + 1)


def ascii_int(name: str, raw: str, lo: int, hi: int) -> int:
    """An integer of ASCII digits in [lo, hi], else 400."""
    if not _INT.fullmatch(raw) or not lo <= int(raw) <= hi:
        raise BadRequest(f"{name} must be an integer in [{lo}, {hi}]")
    return int(raw)


def timestamp(name: str, raw: str) -> datetime:
    """An ISO-8601 time with a zone that PostgreSQL and Python both can hold, else 400."""
    if not _TIMESTAMP.fullmatch(raw):
        if _TIMESTAMP.fullmatch(raw + "Z"):
            raise BadRequest(f"{name} must include a time zone (e.g. Z)")
        raise BadRequest(f"{name} must be an ISO-8601 timestamp with a time zone (e.g. Z)")
    try:
        value = datetime.fromisoformat(raw.upper().replace("Z", "+00:00"))
        value.astimezone(UTC)  # 0001-01-01T00:00+01:00 is before year 1 in UTC
    except (ValueError, OverflowError) as exc:
        raise BadRequest(f"{name} is not a valid time: {exc}") from exc
    return value


# What the headers may add up to: h11's own default limit, and what nginx allows in
# 2 x 8 kB. uvicorn's httptools parser accepts headers of any size; hookrelay's
# protocol (service/server/http_protocol.py) refuses more while reading, and this cap holds the
# app to it under any other server too.
MAX_HEADER_BYTES = 16_384


def _problem(scope: Scope, max_header_bytes: int) -> tuple[int, str, str] | None:
    """(status, code, message) for a request refused before routing, or None."""
    size, nul_in = 0, None
    for name, value in scope["headers"]:
        size += len(name) + len(value) + 4
        if nul_in is None and (b"\x00" in value or b"\x00" in name):
            nul_in = name
    if size > max_header_bytes:
        message = f"request headers are {size} bytes; the limit is {max_header_bytes}"
        return 431, "headers_too_large", message
    # The raw path keeps %00 encoded; the decoded one is what routes see. Only a
    # '%' can encode a NUL, so a path or query without one needs no decoding.
    raw_path = scope.get("raw_path") or scope["path"].encode()
    if "\x00" in scope["path"] or (b"%" in raw_path and b"\x00" in unquote_to_bytes(raw_path)):
        return 400, "invalid_parameter", "the path contains a NUL character"
    query = scope.get("query_string", b"")
    if b"\x00" in query or (b"%" in query and b"\x00" in unquote_to_bytes(query)):
        return 400, "invalid_parameter", "the query string contains a NUL character"
    if nul_in is not None:
        where = f"header {nul_in.decode('latin-1')[:40]!r}"
        return 400, "invalid_parameter", f"{where} contains a NUL character"
    return None


class GuardMiddleware:
    """Before routing: 400 for a NUL anywhere in the path, the query or a header, and
    431 for headers over ``max_header_bytes``, in one pass over the headers."""

    def __init__(self, app: ASGIApp, max_header_bytes: int = MAX_HEADER_BYTES) -> None:
        self.app, self.max_header_bytes = app, max_header_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = _problem(scope, self.max_header_bytes)
            if problem is not None:
                await error_response(*problem)(scope, receive, send)
                return
        await self.app(scope, receive, send)
