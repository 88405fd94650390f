"""``wait`` on a fake clock, with a server that does not hold long polls (no sleeps).

The live server holds them (tests/test_client.py); here httpx's MockTransport plays
one that answers at once, as a proxy that drops ``?wait=`` or a server shutting down
would, so the fallback's schedule can be read off the clock.
"""

from __future__ import annotations

import httpx
import pytest

from hookrelay.client import AsyncClient, Client, WaitTimeout
from tests.clientfakes import AsyncFakeClock, FakeClock, task_json

pytestmark = pytest.mark.anyio


def unheld(finish_after: int | None = None, retry_after: str | None = None, fail: int = 0):
    """A server answering at once: unchanged (304 to a matching If-None-Match) until
    request ``finish_after``, then terminal; the first ``fail`` requests are refused."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) <= fail:
            raise httpx.ConnectError("refused", request=request)
        headers = {"ETag": '"1"'} | ({"Retry-After": retry_after} if retry_after else {})
        if finish_after is not None and len(seen) >= finish_after:
            return httpx.Response(200, json=task_json("succeeded", 2), headers={"ETag": '"2"'})
        if request.headers.get("if-none-match") == '"1"':
            return httpx.Response(304, headers=headers)
        return httpx.Response(200, json=task_json(), headers=headers)

    return handle, seen


def test_polls_back_off_from_200_ms_to_2_s_until_the_timeout() -> None:
    handle, seen = unheld()
    clock = FakeClock()
    with (
        Client(
            "http://hookrelay.test", "k", clock=clock, transport=httpx.MockTransport(handle)
        ) as c,
        pytest.raises(WaitTimeout) as late,
    ):
        c.wait("task_a", timeout=10)
    # 0.2+0.4+0.8+1.6+2+2 = 7 s, then what is left of the 10 s, then one last look.
    assert clock.slept == pytest.approx([0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0, 1.0])
    assert late.value.task is not None and late.value.task.status == "queued"
    assert len(seen) == len(clock.slept) + 1
    waits = [float(r.url.params["wait"]) for r in seen if "wait" in r.url.params]
    assert waits[0] == 10 and waits == sorted(waits, reverse=True)  # what is left each time
    assert all(r.headers.get("if-none-match") == '"1"' for r in seen[1:])


def test_honours_retry_after_and_stops_at_the_terminal_state() -> None:
    handle, _ = unheld(finish_after=5, retry_after="1")
    clock = FakeClock()
    with Client(
        "http://hookrelay.test", "k", clock=clock, transport=httpx.MockTransport(handle)
    ) as c:
        done = c.wait("task_a", timeout=60)
    assert done.status == "succeeded"
    assert clock.slept == [1.0, 1.0, 1.0, 1.6]  # Retry-After: 1 until the schedule passes it


def test_a_lost_connection_backs_off_too() -> None:
    handle, seen = unheld(finish_after=4, fail=2)
    clock = FakeClock()
    with Client(
        "http://hookrelay.test", "k", clock=clock, transport=httpx.MockTransport(handle)
    ) as c:
        assert c.wait("task_a", timeout=60).status == "succeeded"
    assert clock.slept == [0.2, 0.4, 0.8] and len(seen) == 4
    with (
        Client(
            "http://hookrelay.test",
            "k",
            clock=FakeClock(),
            transport=httpx.MockTransport(unheld(fail=99)[0]),
        ) as c,
        pytest.raises(WaitTimeout) as late,
    ):
        c.wait("task_a", timeout=1)
    assert late.value.task is None and "did not answer" in str(late.value)


async def test_the_async_client_keeps_the_same_schedule() -> None:
    handle, _ = unheld(finish_after=6)
    clock = AsyncFakeClock()
    transport = httpx.MockTransport(handle)
    async with AsyncClient("http://hookrelay.test", "k", clock=clock, transport=transport) as c:
        assert (await c.wait("task_a", timeout=60)).status == "succeeded"
    assert clock.slept == [0.2, 0.4, 0.8, 1.6, 2.0]


def test_a_server_that_holds_its_polls_is_asked_again_at_once() -> None:
    clock, seen = FakeClock(), []

    def held(request: httpx.Request) -> httpx.Response:
        # Holds the poll for all of its ?wait=, then says unchanged (or, the third
        # time, that the task moved on, and the fourth that it is done).
        seen.append(request)
        clock.t += float(request.url.params["wait"])
        if len(seen) == 3:
            return httpx.Response(200, json=task_json("running", 2), headers={"ETag": '"2"'})
        if len(seen) == 4:
            return httpx.Response(200, json=task_json("failed", 3), headers={"ETag": '"3"'})
        return httpx.Response(
            304 if len(seen) > 1 else 200, json=task_json(), headers={"ETag": '"1"'}
        )

    with Client(
        "http://hookrelay.test", "k", clock=clock, transport=httpx.MockTransport(held)
    ) as c:
        assert c.wait("task_a", timeout=100).status == "failed"
    assert clock.slept == []  # never a pause: each answer came when it should
    assert [r.url.params["wait"] for r in seen] == ["30", "30", "30", "10"]
