"""Streams on a fake clock: a reset of one task's stream, reconnection and when it stops.

The streams themselves, restarts and the tenant stream's reset run against a live
server in tests/test_client.py and tests/test_client_aio.py; these are the cases a
live server does not give on demand.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from hookrelay.client import Client, ServerError, TransportError, following
from hookrelay.models import Task
from tests.clientfakes import FakeClock, task_json


def frames(*events: tuple[str, int | None, dict[str, Any]]) -> bytes:
    out = []
    for name, event_id, data in events:
        head = f"event: {name}\n" + (f"id: {event_id}\n" if event_id is not None else "")
        out.append(head + f"data: {json.dumps(data)}\n\n")
    return "".join(out).encode()


def test_a_reset_of_a_task_stream_takes_the_current_state_even_if_older() -> None:
    # Resumed from version 9, which this server never had (another database): it says
    # so and sends the current state, version 2, which must not be dropped as old.
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        reset = {"code": "unknown_position", "lastEventId": 9, "resumeAfter": 2}
        body = frames(("reset", None, reset), ("task", 2, task_json("running", 2)))
        if len(seen) > 1:
            body = frames(("task", 3, task_json("succeeded", 3)))
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    with Client(
        "http://h.test", "k", clock=FakeClock(), transport=httpx.MockTransport(handle)
    ) as c:
        events = list(c.follow("task_a", last_event_id=9))
    assert [(e.id, e.reconciled) for e in events] == [(2, True), (3, False)]
    assert [r.headers.get("last-event-id") for r in seen] == ["9", "2"]


def test_reconnects_with_backoff_then_gives_up() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    clock = FakeClock()
    c = Client("http://h.test", "k", clock=clock, transport=httpx.MockTransport(handle))
    with c, pytest.raises(TransportError):
        list(c.follow_all(give_up_after=3))
    assert clock.slept == [0.2, 0.4, 0.8, 1.6, 2.0]  # 3 s of failures, then no more


def test_a_5xx_on_open_is_retried_like_a_lost_connection() -> None:
    answers = iter(
        [
            httpx.Response(503, json={"error": {"code": "unavailable", "message": "m"}}),
            httpx.Response(200, content=frames(("task", 1, task_json("cancelled", 1)))),
        ]
    )
    clock = FakeClock()
    transport = httpx.MockTransport(lambda request: next(answers))
    with Client("http://h.test", "k", clock=clock, transport=transport) as c:
        assert [e.task.status for e in c.follow("task_a")] == ["cancelled"]
    assert clock.slept == [0.2]
    down = httpx.Response(503, json={"error": {"code": "unavailable", "message": "m"}})
    transport = httpx.MockTransport(lambda request: down)
    c = Client("http://h.test", "k", clock=FakeClock(), transport=transport)
    with c, pytest.raises(ServerError):
        list(c.follow("task_a", give_up_after=0))


def test_remembers_versions_of_the_most_recent_tasks(monkeypatch) -> None:
    monkeypatch.setattr(following, "REMEMBERED_TASKS", 2)
    versions = following.Versions()
    a, b, c = (Task.from_json({**task_json(), "id": i}) for i in "abc")
    assert [versions.newer(t) for t in (a, b, a, c)] == [True, True, False, True]
    assert versions.newer(b)  # forgotten: the least recently seen of three
