"""Requests read and answers written through the shapes of ``hookrelay.service.api.shapes``.

A body is read with its size capped while streaming, its content type checked, and
decoded straight into its Struct by msgspec, which validates it in the same pass; the
request guard's rules (``request_guard.check_json``: no NUL, no lone surrogate, at most
32 levels deep) then hold for whatever JSON values it carries. A query string is
converted into its Struct the same way. Refusals name the field's path:

- malformed JSON, a body nested too deep: 400 ``invalid_json``;
- a body that is not its shape: 422 ``validation_error`` (or the field's own code,
  ``shapes.FIELD_CODES``);
- a query parameter that is not its shape: 400 ``bad_request``, or 422 for a
  well-formed value outside an enum (``?status=nope``).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from hookrelay.service.api.errors import (
    BadRequest,
    PayloadTooLarge,
    Unprocessable,
    UnsupportedMediaType,
)
from hookrelay.service.api.request_guard import MAX_DEPTH, check_json
from hookrelay.service.api.shapes import FIELD_CODES

S = TypeVar("S", bound=msgspec.Struct)
_ENCODER = msgspec.json.Encoder()
_AT = re.compile(r" - at `(\$[^`]*)`$")
_MISSING = re.compile(r"missing required field `([^`]+)`")


@cache
def _decoder(shape: type[S]) -> msgspec.json.Decoder[S]:
    return msgspec.json.Decoder(shape)


@cache
def _fields(shape: type[msgspec.Struct]) -> tuple[tuple[str, str], ...]:
    """(attribute, name in JSON) of each field."""
    return tuple((f.name, f.encode_name) for f in msgspec.structs.fields(shape))


async def _raw(request: Request) -> bytes:
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
    if raw.strip():
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype and ctype != "application/json" and not ctype.endswith("+json"):
            raise UnsupportedMediaType("send the body as application/json")
    return raw


def _json(raw: bytes) -> Any:
    """Any JSON value, checked by the guard; 400 when it is not JSON."""
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise BadRequest(f"malformed JSON: {exc}", code="invalid_json") from exc
    check_json(value)
    return value


def _check(value: msgspec.Struct, where: str = "body", depth: int = 1) -> None:
    """The guard's rules over every value a decoded Struct holds."""
    for attr, name in _fields(type(value)):
        item = getattr(value, attr)
        if isinstance(item, msgspec.Struct):
            _check(item, f"{where}.{name}", depth + 1)
        elif item is not None and item is not msgspec.UNSET:
            check_json(item, f"{where}.{name}", depth)


_UNKNOWN = re.compile(r"contains unknown field `([^`]+)`")


def _said(exc: msgspec.ValidationError) -> tuple[str, str]:
    """(the field's path, what is wrong) of a refusal: ``timeoutSeconds``, ``onTimeout.x``,
    ``fields[0]``; "" for the body or query as a whole."""
    message = str(exc)
    at = _AT.search(message)
    path = at.group(1).removeprefix("$").removeprefix(".") if at else ""
    return path, _AT.sub("", message)


def _refusal(exc: msgspec.ValidationError) -> Unprocessable:
    """422 whose message starts with the field's path (as hookrelay.client reads it), with
    the field's own code where it has one."""
    path, text = _said(exc)
    prefix = f"{path}." if path else ""
    if missing := _MISSING.search(text):
        field = prefix + missing.group(1)
        message = f"{field} is required"
    elif unknown := _UNKNOWN.search(text):
        field = prefix + unknown.group(1)
        message = f"unknown field(s): {field}"
    else:
        field = path
        message = f"{path}: {text}" if path else f"the request body: {text}"
    code = FIELD_CODES.get(f"$.{field}" if field else "$", "validation_error")
    return Unprocessable(message, code=code)


async def read_body(request: Request, shape: type[S], *, required: bool = True) -> S:
    """The body as ``shape``; an empty one is ``shape()`` when not ``required``.

    Raises 413/415/400/422.
    """
    raw = await _raw(request)
    if not raw.strip():
        if required:
            raise BadRequest("a JSON request body is required", code="invalid_json")
        return shape()
    try:
        value: S = _decoder(shape).decode(raw)
    except msgspec.ValidationError as exc:
        _json(raw)  # malformed or too deep further on: that is the answer (400)
        raise _refusal(exc) from exc
    except (msgspec.DecodeError, RecursionError) as exc:
        raise BadRequest(f"malformed JSON: {exc}", code="invalid_json") from exc
    if not _fields(shape):
        _json(raw)  # ignored (shapes.NoBody), but still JSON the guard accepts
    # Only an escape can put a NUL or a lone surrogate in a string, and no more brackets
    # than MAX_DEPTH cannot nest deeper: most bodies need no walk.
    elif b"\\u" in raw or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        _check(value)
    return value


async def read_json(request: Request, *, required: bool = True) -> Any:
    """The body as any JSON value, checked by the guard (an empty one is ``None``)."""
    raw = await _raw(request)
    if not raw.strip():
        if required:
            raise BadRequest("a JSON request body is required", code="invalid_json")
        return None
    return _json(raw)


@cache
def _lists(shape: type[msgspec.Struct]) -> frozenset[str]:
    """The names of ``shape``'s comma-separated (list) parameters."""
    info = msgspec.inspect.type_info(shape)
    assert isinstance(info, msgspec.inspect.StructType)
    found = set()
    for f in info.fields:
        kinds = f.type.types if isinstance(f.type, msgspec.inspect.UnionType) else (f.type,)
        for kind in kinds:
            while isinstance(kind, msgspec.inspect.Metadata):
                kind = kind.type
            if isinstance(kind, msgspec.inspect.ListType):
                found.add(f.encode_name)
    return frozenset(found)


def read_query(request: Request, shape: type[S]) -> S:
    """The query string as ``shape``: 400 naming the parameter, or 422 for a value
    outside an enum. Parameters ``shape`` does not name are ignored."""
    params = request.query_params
    lists = _lists(shape)
    raw: dict[str, Any] = {}
    for _, name in _fields(shape):
        value = params.get(name)
        if value is None:
            continue
        if name in lists:
            raw[name] = [part.strip() for part in value.split(",") if part.strip()]
        else:
            raw[name] = value
    try:
        return msgspec.convert(raw, shape, strict=False)
    except msgspec.ValidationError as exc:
        name, text = _said(exc)
        if text.startswith("Invalid enum value") and name in raw and name not in lists:
            raise Unprocessable(f"{name}: {text}") from exc
        raise BadRequest(f"{name}: {text}") from exc


def answer(
    shape: msgspec.Struct, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """``shape`` encoded as the JSON answer."""
    return Response(
        _ENCODER.encode(shape), status_code=status, headers=headers, media_type="application/json"
    )
