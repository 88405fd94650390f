"""GET /v1/tasks: pages bounded in bytes, resumable with nextCursor; fields= for a lighter list."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from hookrelay.service.server.settings import Settings
from tests.support import bearer, eventually

pytestmark = pytest.mark.anyio

PAGE_BYTES = 20_000
INPUT = "x" * 6_000  # about a third of a page per task


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return replace(settings, max_page_bytes=PAGE_BYTES)


async def _submit(client, key: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        r = await client.post(
            "/v1/tasks",
            json={"type": "t", "callbackUrl": "http://127.0.0.1:9/", "input": {"i": i, "x": INPUT}},
            headers=bearer(key),
        )
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    return ids


async def _all_listed(client, key: str, n: int) -> None:
    """Until the listing holds all ``n`` tasks: a page stops at the oldest transaction still
    open (list_tasks' horizon), which the app's own background writes may briefly hold."""

    async def listed() -> bool:
        params = {"fields": "id", "limit": "1000"}
        r = await client.get("/v1/tasks", params=params, headers=bearer(key))
        return len(r.json()["data"]) == n

    await eventually(listed, what=f"{n} tasks listed")


async def test_page_stops_at_the_byte_bound_and_resumes(client, tenant) -> None:
    key = tenant["apiKey"]
    ids = await _submit(client, key, 10)
    await _all_listed(client, key, len(ids))
    seen: list[str] = []
    cursor = None
    for _ in range(20):
        params = {"limit": "1000", **({"cursor": cursor} if cursor else {})}
        r = await client.get("/v1/tasks", params=params, headers=bearer(key))
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert len(r.content) <= PAGE_BYTES + 200, len(r.content)
        page = r.json()
        assert page["data"], page
        seen += [t["id"] for t in page["data"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == ids  # every task once, in order, across pages of ~3 tasks


async def test_one_task_larger_than_a_page_still_comes_back(client, tenant) -> None:
    key = tenant["apiKey"]
    r = await client.post(
        "/v1/tasks",
        json={"type": "t", "callbackUrl": "http://127.0.0.1:9/", "input": "y" * 50_000},
        headers=bearer(key),
    )
    (tid,) = [r.json()["id"]]
    await _submit(client, key, 1)

    async def page() -> dict[str, Any] | None:
        # A page stops at the oldest transaction still open (list_tasks' horizon): the
        # app's own background writes may briefly hold the second task behind it.
        page = (await client.get("/v1/tasks", headers=bearer(key))).json()
        return page if page["nextCursor"] else None

    got = await eventually(page, what="a page that stops after the large task")
    assert [t["id"] for t in got["data"]] == [tid]


async def test_fields_gives_a_lighter_listing(client, tenant) -> None:
    key = tenant["apiKey"]
    ids = await _submit(client, key, 10)
    r = await client.get(
        "/v1/tasks", params={"fields": "status,delivery", "limit": "100"}, headers=bearer(key)
    )
    page = r.json()
    assert [t["id"] for t in page["data"]] == ids and page["nextCursor"] is None
    assert all(set(t) == {"id", "updatedAt", "status", "delivery"} for t in page["data"])
    assert len(r.content) < 5_000


@pytest.mark.parametrize("fields", ["", "status,nope", "input;drop", ","])
async def test_unknown_fields_are_400(client, tenant, fields: str) -> None:
    r = await client.get("/v1/tasks", params={"fields": fields}, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"


async def test_fields_takes_every_field_of_the_task(client, tenant) -> None:
    """fields= once lacked progress, heartbeatTimeoutSeconds and onTimeout (400): the names
    it takes are now the task resource's own, so each field a task shows is selectable."""
    key = tenant["apiKey"]
    r = await client.post(
        "/v1/tasks",
        json={
            "type": "t",
            "callbackUrl": "http://127.0.0.1:9/",
            "heartbeatTimeoutSeconds": 60,
            "onTimeout": {"error": {"code": "expired"}},
        },
        headers=bearer(key),
    )
    task = r.json()

    async def listed() -> list[dict[str, Any]] | None:
        r = await client.get(
            "/v1/tasks",
            params={"fields": "progress,heartbeatTimeoutSeconds,onTimeout"},
            headers=bearer(key),
        )
        assert r.status_code == 200, r.text
        return r.json()["data"] or None  # once past list_tasks' horizon

    (got,) = await eventually(listed)
    assert got == {
        "id": task["id"],
        "updatedAt": task["updatedAt"],
        "progress": None,
        "heartbeatTimeoutSeconds": 60.0,
        "onTimeout": {"error": {"code": "expired"}},
    }
    for name in task:
        r = await client.get("/v1/tasks", params={"fields": name}, headers=bearer(key))
        assert r.status_code == 200, (name, r.text)
        assert r.json()["data"][0][name] == task[name]
    doc = (await client.get("/openapi.json")).json()
    (param,) = [p for p in doc["paths"]["/v1/tasks"]["get"]["parameters"] if p["name"] == "fields"]
    assert set(param["schema"]["items"]["enum"]) == set(task)
    assert (param["style"], param["explode"]) == ("form", False)
