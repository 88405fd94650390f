"""Reading request bodies: size cap while streaming, content type, strict JSON."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from .errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

MAX_DEPTH = 32


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _depth(value: Any, level: int = 0) -> int:
    if level > MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


async def read_json(request: Request, *, required: bool = True) -> Any:
    """The parsed JSON body, capped at the configured size.

    An empty body is ``None`` when not ``required``. Raises 413/415/400.
    """
    limit: int = request.app.state.settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body exceeds {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        if required:
            raise BadRequest("a JSON request body is required", code="invalid_json")
        return None
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype and ctype != "application/json" and not ctype.endswith("+json"):
        raise UnsupportedMediaType("send the body as application/json")
    try:
        text = raw.decode("utf-8")
        value = json.loads(text, parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise BadRequest("request body is not valid UTF-8", code="invalid_json") from exc
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"malformed JSON: {exc}", code="invalid_json") from exc
    if _depth(value) > MAX_DEPTH:
        raise BadRequest(f"JSON nested deeper than {MAX_DEPTH} levels", code="invalid_json")
    return value
