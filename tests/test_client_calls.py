"""The ETag cache behind ``get`` and what ``tasks`` sends (hookrelay.client.calls)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from hookrelay.client import Client
from hookrelay.client.calls import TaskCache
from hookrelay.models import Task
from tests.clientfakes import FakeClock, task_json


def test_the_cache_keeps_the_most_recently_read_tasks() -> None:
    cache = TaskCache(size=2)
    a, b, c = (Task.from_json({**task_json(), "id": i}) for i in "abc")
    cache.put("a", '"1"', a)
    cache.put("b", '"1"', b)
    assert cache.get("a") == ('"1"', a)  # now the most recent
    cache.put("c", '"1"', c)
    assert cache.get("b") is None and cache.get("a") is not None
    cache.put("d", None, a)  # no ETag: nothing to revalidate with
    assert cache.get("d") is None


def test_get_without_an_etag_and_the_listings_parameters() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/tasks":
            return httpx.Response(200, json={"data": [task_json()], "nextCursor": None})
        return httpx.Response(200, json=task_json())  # a proxy dropped the ETag

    with Client(
        "http://h.test", "k", clock=FakeClock(), transport=httpx.MockTransport(handle)
    ) as c:
        c.get("task_a")
        c.get("task_a")
        assert "if-none-match" not in seen[1].headers
        since = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        list(c.tasks(status="failed", updated_after=since, page_size=7))
        list(c.tasks(updated_after="2026-01-01T00:00:00Z"))
    assert dict(seen[2].url.params) == {
        "limit": "7",
        "status": "failed",
        "updatedAfter": "2026-01-02T03:04:05+00:00",
    }
    assert seen[3].url.params["updatedAfter"] == "2026-01-01T00:00:00Z"
