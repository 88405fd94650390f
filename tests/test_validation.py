"""Request shapes field by field, without HTTP: what is accepted, and the error for the rest."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from hookrelay.outbox.egress.dns import Resolver
from hookrelay.outbox.egress.ssrf import AddressPolicy
from hookrelay.outbox.tasks.submit import Cursor
from hookrelay.service.api import validation as v
from hookrelay.service.api.callback_url import check_callback_url
from hookrelay.service.api.errors import BadRequest, Unprocessable

LOOPBACK = AddressPolicy.from_settings("127.0.0.0/8", allow_http=True)
HOOK = "http://127.0.0.1:9/hook"
RESOLVER = Resolver()  # IP-literal hosts only here: never asked


def test_canonical_hash_ignores_key_order() -> None:
    assert v.canonical_hash({"a": 1, "b": [1, 2]}) == v.canonical_hash({"b": [1, 2], "a": 1})
    assert v.canonical_hash({"a": 1}) != v.canonical_hash({"a": 2})


@pytest.mark.anyio
async def test_new_task_keeps_every_field() -> None:
    body = {
        "type": "render.pdf/v2",
        "callbackUrl": HOOK,
        "input": {"page": 1},
        "metadata": {"order": "o-1"},
        "timeoutSeconds": 30,
    }
    task = await v.new_task(body, LOOPBACK, RESOLVER)
    assert (task.type, task.callback_url, task.input) == ("render.pdf/v2", HOOK, {"page": 1})
    assert task.metadata == {"order": "o-1"} and task.timeout_s == 30.0
    assert isinstance(task.timeout_s, float)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "must be a JSON object"),
        (
            {"type": "t", "callbackUrl": HOOK, "extra": 1, "more": 2},
            "unknown field(s): extra, more",
        ),
        ({"callbackUrl": HOOK}, "type is required"),
        ({"type": "-leading-dash", "callbackUrl": HOOK}, "type is required"),
        ({"type": "t", "callbackUrl": HOOK, "metadata": "x"}, "metadata must be a JSON object"),
        ({"type": "t", "callbackUrl": HOOK, "metadata": {"k": "v" * 16_400}}, "metadata exceeds"),
        ({"type": "t", "callbackUrl": HOOK, "timeoutSeconds": -1}, "timeoutSeconds"),
        ({"type": "t", "callbackUrl": HOOK, "timeoutSeconds": 30 * 86400 + 1}, "timeoutSeconds"),
        ({"type": "t", "callbackUrl": HOOK, "timeoutSeconds": False}, "timeoutSeconds"),
    ],
)
async def test_new_task_refusals(body: Any, message: str) -> None:
    with pytest.raises(Unprocessable) as err:
        await v.new_task(body, LOOPBACK, RESOLVER)
    assert message in err.value.message and err.value.code == "validation_error"


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
    assert v.completion({"status": "succeeded", "result": [1]}) == ("succeeded", [1], None)
    assert v.completion({"status": "failed", "error": {"code": "x"}}) == (
        "failed",
        None,
        {"code": "x"},
    )
    for bad in ({"status": "running"}, {}, {"status": "failed", "why": 1}, "failed"):
        with pytest.raises(Unprocessable):
            v.completion(bad)


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


@pytest.mark.parametrize(("raw", "want"), [(None, 0.0), ("0", 0.0), ("2.5", 2.5), ("30", 30.0)])
def test_wait_seconds_accepted(raw: str | None, want: float) -> None:
    assert v.wait_seconds(raw) == want


@pytest.mark.parametrize("raw", ["30.1", "-1", "soon", "nan", "inf"])
def test_wait_seconds_refused(raw: str) -> None:
    with pytest.raises(BadRequest, match="wait must be"):
        v.wait_seconds(raw)


def test_limit() -> None:
    assert v.limit(None) == 100 and v.limit(None, default=7) == 7
    assert v.limit("1") == 1 and v.limit("1000") == 1000
    for bad in ("0", "1001", "-5", "ten", "1.5", ""):
        with pytest.raises(BadRequest, match="limit must be"):
            v.limit(bad)
    assert v.limit("50", maximum=50) == 50


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
