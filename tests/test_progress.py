"""Progress reports and heartbeats: the route, the executor's own transaction, the
heartbeat timeout with its ``onTimeout`` default, and the stuck-work gauges."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import httpx
import pytest

from hookrelay.outbox import report_progress, start_task
from hookrelay.outbox.errors import InvalidTransition, ProgressBackwards, TaskNotFound
from hookrelay.outbox.store import TASKS_CHANNEL
from hookrelay.outbox.tasks.timeouts import sweep_once
from tests.support import ADMIN, bearer, eventually

pytestmark = pytest.mark.anyio
HOOK = "http://127.0.0.1:9/hook"


async def submit(client: httpx.AsyncClient, key: str, **extra: Any) -> dict[str, Any]:
    body = {"type": "review", "callbackUrl": HOOK, **extra}
    r = await client.post("/v1/tasks", json=body, headers=bearer(key))
    assert r.status_code == 202, r.text
    return dict(r.json())


async def running(client: httpx.AsyncClient, key: str, **extra: Any) -> dict[str, Any]:
    task = await submit(client, key, **extra)
    r = await client.post(f"/v1/tasks/{task['id']}/start", headers=ADMIN)
    assert r.status_code == 200
    return dict(r.json())


async def progress(client: httpx.AsyncClient, task_id: str, body: Any) -> httpx.Response:
    return await client.post(f"/v1/tasks/{task_id}/progress", json=body, headers=ADMIN)


async def test_progress_sets_bumps_and_never_goes_back(client, tenant) -> None:
    task = await running(client, tenant["apiKey"])
    assert task["progress"] is None
    r = await progress(client, task["id"], {"percent": 40, "message": "page 4 of 10"})
    assert r.status_code == 200
    got = r.json()
    assert got["version"] == task["version"] + 1
    assert got["progress"]["percent"] == 40 and got["progress"]["message"] == "page 4 of 10"
    assert got["progress"]["updatedAt"].endswith("Z")
    back = await progress(client, task["id"], {"percent": 39.5})
    assert back.status_code == 409 and back.json()["error"]["code"] == "progress_backwards"
    assert back.json()["task"]["progress"]["percent"] == 40
    same = await progress(client, task["id"], {"percent": 40})  # a plain heartbeat
    assert same.status_code == 200 and same.json()["version"] == got["version"] + 1
    shown = await client.get(f"/v1/tasks/{task['id']}", headers=bearer(tenant["apiKey"]))
    assert shown.json()["progress"]["percent"] == 40 and shown.json()["progress"]["message"] is None


async def test_progress_only_on_running_tasks(client, tenant) -> None:
    queued = await submit(client, tenant["apiKey"])
    r = await progress(client, queued["id"], {"percent": 1})
    assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_transition"
    task = await running(client, tenant["apiKey"])
    await client.post(f"/v1/tasks/{task['id']}/complete", json={"status": "failed"}, headers=ADMIN)
    r = await progress(client, task["id"], {"percent": 99})
    assert r.status_code == 409 and r.json()["task"]["status"] == "failed"
    r = await progress(client, "task_nope", {"percent": 1})
    assert r.status_code == 404
    r = await client.post(
        f"/v1/tasks/{task['id']}/progress", json={"percent": 1}, headers=bearer(tenant["apiKey"])
    )
    assert r.status_code == 403


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"percent": -1},
        {"percent": 100.5},
        {"percent": "50"},
        {"percent": True},
        {"percent": None},
        {"percent": 5, "message": 3},
        {"percent": 5, "message": "x" * 1001},
        {"percent": 5, "extra": 1},
        [5],
    ],
)
async def test_progress_validation(client, tenant, body) -> None:
    task = await running(client, tenant["apiKey"])
    r = await progress(client, task["id"], body)
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error", r.text


@pytest.mark.parametrize(
    "extra",
    [
        {"heartbeatTimeoutSeconds": 0.5},
        {"heartbeatTimeoutSeconds": "60"},
        {"heartbeatTimeoutSeconds": True},
        {"onTimeout": "rejected"},
        {"onTimeout": {"result": 1, "status": "failed"}},
    ],
)
async def test_submit_rejects_bad_heartbeat_options(client, tenant, extra) -> None:
    body = {"type": "review", "callbackUrl": HOOK, **extra}
    r = await client.post("/v1/tasks", json=body, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 422, r.text


async def test_progress_wakes_a_long_poll(client, tenant) -> None:
    task = await running(client, tenant["apiKey"])
    etag = (await client.get(f"/v1/tasks/{task['id']}", headers=bearer(tenant["apiKey"]))).headers[
        "etag"
    ]
    poll = asyncio.create_task(
        client.get(
            f"/v1/tasks/{task['id']}?wait=20",
            headers={**bearer(tenant["apiKey"]), "If-None-Match": etag},
        )
    )
    await asyncio.sleep(0.3)
    assert not poll.done()
    await progress(client, task["id"], {"percent": 70})
    r = await asyncio.wait_for(poll, 10)
    assert r.status_code == 200 and r.json()["progress"]["percent"] == 70


async def test_progress_in_a_rolled_back_transaction_leaves_nothing(
    pool, client, tenant, dsn
) -> None:
    task = await running(client, tenant["apiKey"])
    heard: list[str] = []
    listener = await asyncpg.connect(dsn)
    await listener.add_listener(TASKS_CHANNEL, lambda *args: heard.append(args[-1]))
    try:
        async with pool.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            done = await report_progress(conn, task["id"], 55, "inside")
            assert done.progress["percent"] == 55
            await tx.rollback()
        await asyncio.sleep(0.3)
        row = await pool.fetchrow("SELECT progress, version FROM tasks WHERE id = $1", task["id"])
        assert row["progress"] is None and row["version"] == task["version"]
        assert heard == []
        async with pool.acquire() as conn:
            await report_progress(conn, task["id"], 56)
        assert await eventually(lambda: task["id"] in heard, 5.0)
    finally:
        await listener.close()


async def test_report_progress_errors_carry_the_task(pool, client, tenant) -> None:
    task = await running(client, tenant["apiKey"])
    async with pool.acquire() as conn:
        await report_progress(conn, task["id"], 80)
        with pytest.raises(ProgressBackwards) as back:
            await report_progress(conn, task["id"], 10)
        assert back.value.current.progress["percent"] == 80
        with pytest.raises(TaskNotFound):
            await report_progress(conn, "task_nope", 10)
        with pytest.raises(ValueError):
            await report_progress(conn, task["id"], float("nan"))
        queued = await submit(client, tenant["apiKey"])
        with pytest.raises(InvalidTransition):
            await report_progress(conn, queued["id"], 10)


async def _silence(pool: asyncpg.Pool, task_id: str) -> None:
    # As if the executor had been silent past its budget (no sleeping in tests).
    await pool.execute(
        "UPDATE tasks SET heartbeat_due_at = now() - interval '1 second' WHERE id = $1", task_id
    )


async def test_silent_executor_times_out_with_the_default_path(client, pool, tenant) -> None:
    default = {"result": {"decision": "rejected", "why": "no review within 48 h"}}
    task = await running(client, tenant["apiKey"], heartbeatTimeoutSeconds=60, onTimeout=default)
    assert task["heartbeatTimeoutSeconds"] == 60 and task["onTimeout"] == default
    alive = await running(client, tenant["apiKey"], heartbeatTimeoutSeconds=60)
    await _silence(pool, task["id"])
    assert await sweep_once(pool) == 1
    got = (await client.get(f"/v1/tasks/{task['id']}", headers=bearer(tenant["apiKey"]))).json()
    assert got["status"] == "timed_out" and got["result"] == default["result"]
    assert got["error"] is None
    body = json.loads(
        await pool.fetchval(
            "SELECT body FROM events WHERE event_id = $1", got["delivery"]["eventId"]
        )
    )
    assert body["type"] == "task.timed_out" and body["data"]["result"] == default["result"]
    still = (await client.get(f"/v1/tasks/{alive['id']}", headers=bearer(tenant["apiKey"]))).json()
    assert still["status"] == "running"


async def test_progress_pushes_the_heartbeat_deadline(client, pool, tenant) -> None:
    task = await running(client, tenant["apiKey"], heartbeatTimeoutSeconds=60)
    await _silence(pool, task["id"])
    await progress(client, task["id"], {"percent": 5})  # the executor is alive after all
    assert await sweep_once(pool) == 0
    due = await pool.fetchval(
        "SELECT heartbeat_due_at - now() FROM tasks WHERE id = $1", task["id"]
    )
    assert 55 < due.total_seconds() <= 60


async def test_heartbeat_timeout_without_default_says_why(client, pool, tenant) -> None:
    task = await running(client, tenant["apiKey"], heartbeatTimeoutSeconds=30)
    queued = await submit(client, tenant["apiKey"], heartbeatTimeoutSeconds=30)
    await _silence(pool, task["id"])
    await pool.execute(  # a queued task has no executor yet: its heartbeat never runs
        "UPDATE tasks SET heartbeat_due_at = now() - interval '1 second' WHERE id = $1",
        queued["id"],
    )
    assert await sweep_once(pool) == 1
    got = (await client.get(f"/v1/tasks/{task['id']}", headers=bearer(tenant["apiKey"]))).json()
    assert got["status"] == "timed_out" and got["error"]["code"] == "heartbeat_timeout"
    assert "30 s" in got["error"]["message"]
    q = (await client.get(f"/v1/tasks/{queued['id']}", headers=bearer(tenant["apiKey"]))).json()
    assert q["status"] == "queued"


async def test_whole_life_deadline_also_takes_on_timeout(client, pool, tenant) -> None:
    default = {"error": {"code": "expired", "message": "offer expired"}}
    task = await submit(client, tenant["apiKey"], timeoutSeconds=60, onTimeout=default)
    await pool.execute(
        "UPDATE tasks SET timeout_at = now() - interval '1 second' WHERE id = $1", task["id"]
    )
    assert await sweep_once(pool) == 1
    got = (await client.get(f"/v1/tasks/{task['id']}", headers=bearer(tenant["apiKey"]))).json()
    assert got["status"] == "timed_out" and got["error"] == default["error"]


async def test_start_in_the_executors_transaction_starts_the_clock(pool, client, tenant) -> None:
    task = await submit(client, tenant["apiKey"], heartbeatTimeoutSeconds=120)
    async with pool.acquire() as conn:
        started = await start_task(conn, task["id"])
    assert started.heartbeat_at is not None and started.heartbeat_due_at is not None
    assert (started.heartbeat_due_at - started.heartbeat_at).total_seconds() == 120


def _value(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in metrics")


async def test_stuck_work_is_visible_in_metrics(client, pool, tenant) -> None:
    fresh = await running(client, tenant["apiKey"])
    stuck = await running(client, tenant["apiKey"])
    await pool.execute(
        "UPDATE tasks SET heartbeat_at = now() - interval '11 minutes' WHERE id = $1", stuck["id"]
    )
    text = (await client.get("/metrics", headers=ADMIN)).text
    assert _value(text, "hookrelay_tasks_stuck") == 1
    assert 660 <= _value(text, "hookrelay_tasks_running_oldest_silence_seconds") < 720
    await progress(client, stuck["id"], {"percent": 1})
    text = (await client.get("/metrics", headers=ADMIN)).text
    assert _value(text, "hookrelay_tasks_stuck") == 0
    assert fresh["status"] == "running"
