"""Which failed requests the client sends again, and after how long (a fake clock, no sleeps).

Pure unit tests on httpx's MockTransport: the failures a live server rarely gives on
demand (a 503, a 429 on a plain call, a reset after the request left). The lost
answers a real server does give are in tests/test_client.py.
"""

from __future__ import annotations

import httpx
import pytest

from hookrelay.client import (
    AsyncClient,
    Client,
    Conflict,
    RateLimited,
    ServerError,
    TransportError,
)
from hookrelay.client.errors import ApiError
from hookrelay.client.retry import should_retry
from tests.clientfakes import AsyncFakeClock, FakeClock, task_json

pytestmark = pytest.mark.anyio


def answers(*script):
    """A transport answering each request with the next item: a Response, or an
    exception class raised as a transport error."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        item = script[min(len(seen), len(script)) - 1]
        if isinstance(item, type):
            raise item("boom", request=request)
        # A fresh copy each time: a response belongs to the one request it answers.
        return httpx.Response(item.status_code, headers=item.headers, content=item.content)

    return httpx.MockTransport(handle), seen


def error(status: int, code: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": code}}, headers=headers)


OK = httpx.Response(202, json=task_json())


def client(transport: httpx.MockTransport, clock: FakeClock) -> Client:
    return Client("http://hookrelay.test", "k", clock=clock, transport=transport)


def test_5xx_and_lost_answers_are_sent_again_with_the_backoff() -> None:
    transport, seen = answers(error(503, "unavailable"), httpx.ReadError, error(500, "x"), OK)
    clock = FakeClock()
    with client(transport, clock) as c:
        assert c.submit("t", callback_url="https://h.example/").status == "queued"
    assert clock.slept == [0.2, 0.4, 0.8] and len(seen) == 4
    assert len({r.headers["idempotency-key"] for r in seen}) == 1


def test_429_waits_its_retry_after_and_without_one_is_raised() -> None:
    transport, seen = answers(error(429, "slow_down", {"Retry-After": "3"}), OK)
    clock = FakeClock()
    with client(transport, clock) as c:
        c.submit("t", callback_url="https://h.example/")
    assert clock.slept == [3.0]
    transport, seen = answers(error(429, "slow_down"), OK)
    with client(transport, FakeClock()) as c, pytest.raises(RateLimited) as limited:
        c.submit("t", callback_url="https://h.example/")
    assert limited.value.retry_after is None and len(seen) == 1


def test_a_submit_still_in_flight_is_asked_again() -> None:
    busy = error(409, "idempotency_in_flight", {"Retry-After": "1"})
    transport, seen = answers(busy, busy, OK)
    clock = FakeClock()
    with client(transport, clock) as c:
        c.submit("t", callback_url="https://h.example/", idempotency_key="k1")
    assert clock.slept == [1.0, 1.0] and {r.headers["idempotency-key"] for r in seen} == {"k1"}


def test_after_the_last_attempt_the_last_error_is_raised() -> None:
    transport, seen = answers(error(502, "bad_gateway", {"Retry-After": "2"}))
    clock = FakeClock()
    c = Client("http://h.test", "k", clock=clock, transport=transport, attempts=3)
    with c, pytest.raises(ServerError) as failed:
        c.get("task_a")
    assert failed.value.status == 502 and failed.value.attempts == 3 and len(seen) == 3
    assert clock.slept == [2.0, 2.0]


def test_a_test_event_is_sent_again_only_when_it_never_left() -> None:
    sent = httpx.Response(202, json={"eventId": "evt_1", "type": "ping", "status": "pending"})
    transport, seen = answers(httpx.ConnectError, error(503, "unavailable"), sent)
    with client(transport, FakeClock()) as c:
        assert c.test_event("https://h.example/").event_id == "evt_1"
    assert len(seen) == 3
    for lost in (httpx.ReadError, httpx.RemoteProtocolError, httpx.ReadTimeout):
        transport, seen = answers(lost, sent)
        with client(transport, FakeClock()) as c, pytest.raises(TransportError) as raised:
            c.test_event("https://h.example/")
        assert raised.value.sent and len(seen) == 1  # a resend would be a second ping
    transport, seen = answers(error(500, "internal_error"), sent)
    with client(transport, FakeClock()) as c, pytest.raises(ServerError):
        c.test_event("https://h.example/")


def test_other_errors_are_not_sent_again() -> None:
    for status, code in [(400, "bad_request"), (404, "not_found"), (409, "invalid_transition")]:
        transport, seen = answers(error(status, code))
        with client(transport, FakeClock()) as c, pytest.raises(ApiError):
            c.cancel("task_a")
        assert len(seen) == 1, status


def test_a_conflict_on_the_first_send_is_not_taken_for_an_answer() -> None:
    # Cancelled by someone else before this cancel: a real conflict, even though the
    # task shows the state asked for.
    body = {
        "error": {"code": "invalid_transition", "message": "m"},
        "task": task_json("cancelled", 2),
    }
    transport, _ = answers(httpx.Response(409, json=body))
    with client(transport, FakeClock()) as c, pytest.raises(Conflict) as conflict:
        c.cancel("task_a")
    assert conflict.value.attempts == 1 and conflict.value.task is not None


@pytest.mark.parametrize(
    ("exc", "kind", "again"),
    [
        (TransportError("x", sent=True), "safe", True),
        (TransportError("x", sent=True), "unsent", False),
        (TransportError("x", sent=False), "unsent", True),
        (TransportError("x", sent=False), "none", False),
        (ServerError(503, "unavailable", "m"), "unsent", True),
        (ServerError(500, "internal_error", "m"), "unsent", False),
        (RateLimited(429, "x", "m", retry_after=1), "unsent", True),
        (Conflict(409, "invalid_transition", "m"), "safe", False),
        (ValueError("not ours"), "safe", False),
    ],
)
def test_the_retry_rule(exc, kind, again) -> None:
    assert should_retry(exc, kind) is again


async def test_the_async_client_retries_alike() -> None:
    transport, seen = answers(
        httpx.ConnectError, error(503, "unavailable", {"Retry-After": "1"}), OK
    )
    clock = AsyncFakeClock()
    async with AsyncClient("http://h.test", "k", clock=clock, transport=transport) as c:
        assert (await c.submit("t", callback_url="https://h.example/")).status == "queued"
    assert clock.slept == [0.2, 1.0] and len(seen) == 3
    transport, _ = answers(error(404, "not_found"))
    async with AsyncClient("http://h.test", "k", clock=clock, transport=transport) as c:
        with pytest.raises(ApiError) as missing:
            await c.get("task_a")
    assert missing.value.attempts == 1
