"""Reading request bodies: size cap while streaming, content type, strict JSON."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from hookrelay.service.api.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType
from hookrelay.service.api.request_guard import check_json, finite_float


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# Built once: json.loads with hooks builds a new decoder on every call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=finite_float)


async def read_json(request: Request, *, required: bool = True) -> Any:
    """The parsed JSON body, capped at the configured size, checked by ``guard.check_json``.

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
        value = _DECODER.decode(text)
    except UnicodeDecodeError as exc:
        raise BadRequest("request body is not valid UTF-8", code="invalid_json") from exc
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"malformed JSON: {exc}", code="invalid_json") from exc
    check_json(value)  # NUL, lone surrogates, depth: 400/422 here, not 500 in the database
    return value
