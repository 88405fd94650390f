"""Request shapes field by field, without HTTP: what is accepted, and the error for the rest."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from hookrelay.outbox.egress.dns import Resolver
from hookrelay.outbox.egress.ssrf import AddressPolicy
from hookrelay.outbox.tasks.submit import Cursor
from hookrelay.service.api import shapes
from hookrelay.service.api import validation as v
from hookrelay.service.api.callback_url import check_callback_url
from hookrelay.service.api.errors import BadRequest, Unprocessable

LOOPBACK = AddressPolicy.from_settings("127.0.0.0/8", allow_http=True)
HOOK = "http://127.0.0.1:9/hook"
RESOLVER = Resolver()  # IP-literal hosts only here: never asked


def submit(**fields: Any) -> shapes.SubmitBody:
    return msgspec.convert({"type": "t", "callbackUrl": HOOK, **fields}, shapes.SubmitBody)


def test_canonical_hash_ignores_key_order() -> None:
    a, b = submit(input={"a": 1, "b": [1, 2]}), submit(input={"b": [1, 2], "a": 1})
    assert v.canonical_hash(a) == v.canonical_hash(b)
    assert v.canonical_hash(a) != v.canonical_hash(submit(input={"a": 2}))
    # null and absent are the same request
    assert v.canonical_hash(submit(metadata=None)) == v.canonical_hash(submit())


def test_submit_keeps_every_field() -> None:
    body = submit(
        type="render.pdf/v2",
        input={"page": 1},
        metadata={"order": "o-1"},
        timeoutSeconds=30,
        onTimeout={"result": {"approved": False}},
    )
    assert (body.type, body.callback_url, body.input) == ("render.pdf/v2", HOOK, {"page": 1})
    assert body.metadata == {"order": "o-1"} and body.timeout_seconds == 30.0
    assert isinstance(body.timeout_seconds, float)
    assert msgspec.to_builtins(body.on_timeout) == {"result": {"approved": False}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "Expected `object`, got `array`"),
        ({"type": "t", "callbackUrl": HOOK, "extra": 1}, "unknown field `extra`"),
        ({"callbackUrl": HOOK}, "missing required field `type`"),
        ({"type": "-leading-dash", "callbackUrl": HOOK}, "at `$.type`"),
        ({"type": "t\n", "callbackUrl": HOOK}, "at `$.type`"),
        ({"type": "t", "callbackUrl": HOOK, "metadata": "x"}, "at `$.metadata`"),
        (
            {"type": "t", "callbackUrl": HOOK, "metadata": {"k": "v" * 16_400}},
            "exceeds 16384 bytes as JSON - at `$.metadata`",
        ),
        (
            {"type": "t", "callbackUrl": HOOK, "onTimeout": {"result": "v" * 16_400}},
            "exceeds 16384 bytes as JSON - at `$.onTimeout`",
        ),
        ({"type": "t", "callbackUrl": HOOK, "onTimeout": {"x": 1}}, "at `$.onTimeout`"),
        ({"type": "t", "callbackUrl": HOOK, "timeoutSeconds": -1}, "at `$.timeoutSeconds`"),
        ({"type": "t", "callbackUrl": HOOK, "timeoutSeconds": 30 * 86400 + 1}, "timeoutSeconds"),
        ({"type": "t", "callbackUrl": HOOK, "timeoutSeconds": False}, "timeoutSeconds"),
        ({"type": "t", "callbackUrl": HOOK, "heartbeatTimeoutSeconds": 0.5}, "heartbeat"),
    ],
)
def test_submit_refusals_name_the_path(body: Any, message: str) -> None:
    with pytest.raises(msgspec.ValidationError) as err:
        msgspec.json.decode(json.dumps(body), type=shapes.SubmitBody)
    assert message in str(err.value)


def test_metadata_cap_counts_utf8_json_bytes() -> None:
    """The cap the schema documents (x-max-json-bytes): the metadata's JSON, in UTF-8."""
    room = shapes.MAX_JSON_BYTES - len(b'{"k":""}')
    assert submit(metadata={"k": "v" * room}).metadata
    with pytest.raises(msgspec.ValidationError):
        submit(metadata={"k": "v" * (room + 1)})
    assert submit(metadata={"k": "é" * (room // 2)}).metadata  # 2 bytes each


@pytest.mark.parametrize("name", ["a", " a ", "\u3000x", "é" * 200])
def test_tenant_names_accepted(name: str) -> None:
    body = msgspec.convert({"name": name}, shapes.TenantBody)
    assert shapes.strip_blank(body.name)


@pytest.mark.parametrize("name", ["", " ", "\t\n", "\u3000", "\x1c", "\ufeff", "\xa0 ", "x" * 201])
def test_blank_tenant_names_refused_by_the_schema(name: str) -> None:
    """Whitespace-only names: refused by the pattern the schema publishes, which names
    the same blanks as the strip the server applies (Python's and JavaScript's \\s differ)."""
    import jsonschema_rs

    schema = msgspec.json.schema(shapes.TenantBody)
    assert not jsonschema_rs.validator_for(schema).is_valid({"name": name})
    with pytest.raises(msgspec.ValidationError, match="name"):
        msgspec.convert({"name": name}, shapes.TenantBody)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("url", "code", "message"),
    [
        (None, "invalid_callback_url", "is required"),
        ("", "invalid_callback_url", "is required"),
        ("ftp://127.0.0.1/hook", "invalid_callback_url", "callbackUrl is invalid"),
        ("http://10.1.2.3/hook", "blocked_callback_url", "callbackUrl refused"),
        ("http://169.254.169.254/latest", "blocked_callback_url", "callbackUrl refused"),
    ],
)
async def test_callback_url_refusals(url: Any, code: str, message: str) -> None:
    with pytest.raises(Unprocessable) as err:
        await check_callback_url(url, LOOPBACK, RESOLVER)
    assert err.value.code == code and message in err.value.message


@pytest.mark.anyio
async def test_http_callbacks_need_the_setting() -> None:
    strict = AddressPolicy.from_settings("127.0.0.0/8", allow_http=False)
    with pytest.raises(Unprocessable):
        await check_callback_url(HOOK, strict, RESOLVER)
    assert await check_callback_url(HOOK, LOOPBACK, RESOLVER) == HOOK


def test_completion() -> None:
    done = msgspec.convert({"status": "succeeded", "result": [1]}, shapes.CompleteBody)
    assert (done.status, done.result, done.error) == ("succeeded", [1], None)
    for bad in ({"status": "running"}, {}, {"status": "failed", "why": 1}, "failed"):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(bad, shapes.CompleteBody)


@pytest.mark.parametrize("raw", ["k", "order-1:retry/2", "~" * 255])
def test_idempotency_keys_accepted(raw: str) -> None:
    assert v.idempotency_key(raw) == raw


@pytest.mark.parametrize("raw", ["", "has space", "é", "x" * 256, "tab\there"])
def test_idempotency_keys_refused(raw: str) -> None:
    with pytest.raises(BadRequest, match="Idempotency-Key"):
        v.idempotency_key(raw)
    assert v.idempotency_key(None) is None


def test_timestamps() -> None:
    assert v.timestamp("since", None) is None
    assert v.timestamp("since", "2026-12-02T13:00:00Z") == datetime(2026, 12, 2, 13, tzinfo=UTC)
    with pytest.raises(BadRequest, match="since must include a time zone"):
        v.timestamp("since", "2026-12-02T13:00:00")
    with pytest.raises(BadRequest, match="until must be an ISO-8601 timestamp"):
        v.timestamp("until", "yesterday")


def test_cursor_round_trip() -> None:
    cursor = Cursor(datetime(2026, 12, 2, 13, 0, 0, 123456, tzinfo=UTC), "task_abc")
    encoded = v.encode_cursor(cursor)
    assert encoded is not None and "=" not in encoded
    assert v.decode_cursor(encoded) == cursor
    assert v.encode_cursor(None) is None and v.decode_cursor(None) is None


@pytest.mark.parametrize(
    "raw", ["not-base64!", "bm90IGpzb24", "WzFd", "WyJub3QgYSBkYXRlIiwgIngiXQ"]
)
def test_cursor_tampered(raw: str) -> None:
    with pytest.raises(BadRequest, match="cursor is invalid"):
        v.decode_cursor(raw)
