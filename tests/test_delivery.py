"""One attempt against respx-faked receivers: every delivery rule → the right next state."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import uuid
from datetime import timedelta

import httpx
import pytest
import respx

from hookrelay.outbox.dispatch.attempt import AttemptLimits, ClaimedEvent, attempt
from hookrelay.outbox.dispatch.retry import RetryPolicy
from hookrelay.outbox.egress.http import HttpxSender
from hookrelay.outbox.egress.ssrf import AddressPolicy
from hookrelay.outbox.keys.signing import Signer
from hookrelay.outbox.models import EventId, TaskId, TenantId

pytestmark = pytest.mark.anyio
URL = "https://hooks.example.com/in"
SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
POLICY = RetryPolicy(base_s=10, cap_s=100, max_attempts=3)
OPEN = AddressPolicy()


def event(budget_used: int = 0, url: str = URL) -> ClaimedEvent:
    return ClaimedEvent(
        id=1,
        event_id=EventId("evt_abc"),
        tenant_id=TenantId("ten_x"),
        task_id=TaskId("task_x"),
        event_type="task.succeeded",
        callback_url=url,
        host="hooks.example.com",
        body=b'{"type":"task.succeeded"}',
        attempts=budget_used,
        budget_used=budget_used,
        secret_version=1,
        token=uuid.uuid4(),
    )


DEFAULT_LIMITS = AttemptLimits()


async def run(
    ev: ClaimedEvent | None = None,
    limits: AttemptLimits = DEFAULT_LIMITS,
    addresses: AddressPolicy = OPEN,
):
    sender = HttpxSender(httpx.AsyncClient())
    try:
        return await attempt(sender, ev or event(), Signer([SECRET]), POLICY, addresses, limits)
    finally:
        await sender.aclose()


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
async def test_2xx_is_delivered(status: int) -> None:
    with respx.mock:
        respx.post(URL).mock(return_value=httpx.Response(status, text="thanks"))
        r = await run()
    assert r.outcome == "delivered" and r.status_code == status and r.next_at is None
    assert r.response_prefix == "thanks" and r.error is None and r.duration_ms >= 0


async def test_request_is_signed_standard_webhooks() -> None:
    with respx.mock:
        route = respx.post(URL).mock(return_value=httpx.Response(204))
        await run()
    req = route.calls.last.request
    assert req.headers["content-type"] == "application/json"
    assert req.headers["webhook-id"] == "evt_abc"
    ts = req.headers["webhook-timestamp"]
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    expected = base64.b64encode(
        hmac.new(key, f"evt_abc.{ts}.".encode() + req.content, hashlib.sha256).digest()
    ).decode()
    assert req.headers["webhook-signature"] == f"v1,{expected}"
    assert req.content == b'{"type":"task.succeeded"}'


async def test_410_is_dead_at_once() -> None:
    with respx.mock:
        respx.post(URL).mock(return_value=httpx.Response(410))
        r = await run()
    assert r.outcome == "dead" and "410" in (r.error or "") and r.next_at is None


@pytest.mark.parametrize("status", [500, 502, 400, 404, 408])
async def test_other_status_is_retried_with_backoff(status: int) -> None:
    with respx.mock:
        respx.post(URL).mock(return_value=httpx.Response(status))
        r = await run()
    assert r.outcome == "retry" and r.status_code == status
    delay = (r.next_at - r.attempted_at).total_seconds()
    assert 5 <= delay <= 10  # after attempt 1: half to all of base


async def test_backoff_grows_with_budget_used() -> None:
    with respx.mock:
        respx.post(URL).mock(return_value=httpx.Response(500))
        r = await run(event(budget_used=1))
    delay = (r.next_at - r.attempted_at).total_seconds()
    assert 10 <= delay <= 20


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_is_honoured(status: int) -> None:
    with respx.mock:
        respx.post(URL).mock(return_value=httpx.Response(status, headers={"Retry-After": "60"}))
        r = await run()
    assert r.outcome == "retry"
    assert r.next_at - r.attempted_at == timedelta(seconds=60)


async def test_retry_after_is_capped_by_policy() -> None:
    with respx.mock:
        respx.post(URL).mock(return_value=httpx.Response(429, headers={"Retry-After": "99999"}))
        r = await run()
    assert r.next_at - r.attempted_at == timedelta(seconds=POLICY.cap_s)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_redirect_is_not_followed(status: int) -> None:
    with respx.mock:
        respx.post(URL).mock(
            return_value=httpx.Response(status, headers={"Location": "http://10.0.0.1/"})
        )
        other = respx.post("http://10.0.0.1/").mock(return_value=httpx.Response(200))
        r = await run()
    assert r.outcome == "retry" and "redirect" in (r.error or "")
    assert not other.called


async def test_timeout_is_retried() -> None:
    with respx.mock:
        respx.post(URL).mock(side_effect=httpx.ReadTimeout("slow"))
        r = await run()
    assert r.outcome == "retry" and r.status_code is None and "ReadTimeout" in (r.error or "")


async def test_connection_error_is_retried() -> None:
    with respx.mock:
        respx.post(URL).mock(side_effect=httpx.ConnectError("refused"))
        r = await run()
    assert r.outcome == "retry" and "ConnectError" in (r.error or "")


async def test_last_attempt_goes_dead() -> None:
    with respx.mock:
        respx.post(URL).mock(return_value=httpx.Response(500))
        r = await run(event(budget_used=2))  # this is attempt 3 of 3
    assert r.outcome == "dead" and r.next_at is None and "gave up after 3" in (r.error or "")


async def test_response_body_is_capped() -> None:
    with respx.mock:
        respx.post(URL).mock(return_value=httpx.Response(200, content=b"x" * 1_000_000))
        r = await run(limits=AttemptLimits(max_response_bytes=1000))
    assert r.outcome == "delivered" and len(r.response_prefix or "") <= 256


async def test_ip_literal_to_private_address_is_dead() -> None:
    with respx.mock:
        route = respx.post("http://127.0.0.1/in").mock(return_value=httpx.Response(200))
        r = await run(event(url="http://127.0.0.1/in"), addresses=AddressPolicy(allow_http=True))
    assert r.outcome == "dead" and "refused" in (r.error or "")
    assert not route.called


async def test_nul_bytes_in_the_answer_are_storable() -> None:
    # PostgreSQL text cannot hold NUL; an unstorable outcome would be retried forever.
    with respx.mock:
        respx.post(URL).mock(return_value=httpx.Response(200, content=b"ok\x00\x00tail"))
        r = await run()
    assert r.outcome == "delivered" and "\x00" not in (r.response_prefix or "")
    assert r.response_prefix == "ok\\x00\\x00tail"


async def test_malformed_url_is_dead_without_a_request() -> None:
    with respx.mock:
        r = await run(event(url="https://user:pw@hooks.example.com/in"))
    assert r.outcome == "dead" and (r.error or "").startswith("invalid callback URL")


class BrokenSigner(Signer):
    def headers(self, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        raise ValueError("a bug, not a bad URL")


async def test_other_value_errors_are_not_taken_for_a_bad_url() -> None:
    # Only URL errors dead-letter an event; a bug must surface, not bury the event.
    sender = HttpxSender(httpx.AsyncClient())
    try:
        with respx.mock, pytest.raises(ValueError, match="a bug"):
            await attempt(sender, event(), BrokenSigner([SECRET]), POLICY, OPEN, DEFAULT_LIMITS)
    finally:
        await sender.aclose()


class Hanging:
    """A sender whose receiver never answers."""

    async def post(self, url, body, headers, cap):
        await asyncio.sleep(3600)

    async def aclose(self) -> None:
        pass


async def test_the_deadline_ends_the_attempt_and_the_task_goes_on() -> None:
    """The deadline cancels only the request: the task that made the attempt carries
    on (a dispatcher's slot sends its lane's next row in the same task)."""
    limits = AttemptLimits(total_timeout_s=0.05)

    async def slot():
        first = await attempt(Hanging(), event(), Signer([SECRET]), POLICY, OPEN, limits)
        await asyncio.sleep(0)  # would raise if the deadline's cancellation lingered
        me = asyncio.current_task()
        return first, me.cancelling() if me else None

    result, cancelling = await asyncio.wait_for(asyncio.create_task(slot()), 5)
    assert result.outcome == "retry" and result.error == "timed out after 0.05s"
    assert cancelling == 0 and 40 < result.duration_ms < 2000


async def test_a_cancellation_not_of_the_deadline_is_not_swallowed() -> None:
    running = asyncio.create_task(
        attempt(Hanging(), event(), Signer([SECRET]), POLICY, OPEN, DEFAULT_LIMITS)
    )
    await asyncio.sleep(0.05)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


async def test_a_deadline_and_another_cancellation_together_are_not_swallowed() -> None:
    """Both at once (a shutdown as the deadline fires): the deadline is not taken for
    the whole cancellation, so the task still ends cancelled."""
    from hookrelay.outbox.dispatch.attempt import Deadline

    caused: list[bool] = []

    async def body() -> None:
        me = asyncio.current_task()
        assert me is not None
        deadline = Deadline(asyncio.get_running_loop(), me, 0.01)
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            me.cancel()  # someone else's, delivered with the deadline's
            caused.append(deadline.caused())
            raise

    task = asyncio.create_task(body())
    with pytest.raises(asyncio.CancelledError):
        await task
    assert caused == [False] and task.cancelled()
