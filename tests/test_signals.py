"""After-commit signals: the API's writes wake dispatchers and streams with no NOTIFY
inside the writer's transaction."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from hookrelay.outbox.store import OUTBOX_CHANNEL, TASKS_CHANNEL, changes
from hookrelay.outbox.tasks.state_changes import destination_host
from tests.support import ADMIN, bearer, dispatcher, eventually

pytestmark = [pytest.mark.anyio, pytest.mark.processes]
HOOK = "http://127.0.0.1:9/hook"


async def test_a_completion_wakes_dispatchers_after_its_commit(client, dsn, pool) -> None:
    tenant = (await client.post("/v1/admin/tenants", json={"name": "s"}, headers=ADMIN)).json()
    key = bearer(tenant["apiKey"])
    app = client._transport.app
    local: list[int] = []
    app.state.signals.wake_locally(lambda _lane: local.append(1))
    heard: list[tuple[str, int]] = []
    listener = await asyncpg.connect(dsn)
    for channel in (OUTBOX_CHANNEL, TASKS_CHANNEL):
        await listener.add_listener(channel, lambda _c, pid, ch, _p: heard.append((ch, pid)))
    try:
        tid = (
            await client.post("/v1/tasks", json={"type": "t", "callbackUrl": HOOK}, headers=key)
        ).json()["id"]
        await client.post(f"/v1/tasks/{tid}/start", headers=ADMIN)
        assert local == []  # nothing to deliver yet
        r = await client.post(
            f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN
        )
        assert r.status_code == 200
        assert local == [1]  # this process's dispatcher: at once
        # Every other dispatcher: one NOTIFY, from a connection that wrote nothing.
        await eventually(lambda: [ch for ch, _ in heard] == [OUTBOX_CHANNEL])
        writers = await pool.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        )
        assert heard[0][1] in {w["pid"] for w in writers}

        # The streams got the three changes numbered, with no sweeper running.
        async def numbered() -> bool:
            async with pool.acquire() as conn:
                position = await changes.stream_position(conn, tenant_id=tenant["id"])
            return position.last_seq == 3

        await eventually(numbered)
    finally:
        await listener.close()


async def test_a_burst_of_completions_sends_few_notifications(client, dsn) -> None:
    tenant = (await client.post("/v1/admin/tenants", json={"name": "b"}, headers=ADMIN)).json()
    key = bearer(tenant["apiKey"])
    ids = [
        (
            await client.post("/v1/tasks", json={"type": "t", "callbackUrl": HOOK}, headers=key)
        ).json()["id"]
        for _ in range(40)
    ]
    heard: list[int] = []
    listener = await asyncpg.connect(dsn)
    await listener.add_listener(OUTBOX_CHANNEL, lambda *_: heard.append(1))
    try:
        done = await asyncio.gather(
            *(
                client.post(f"/v1/tasks/{t}/complete", json={"status": "failed"}, headers=ADMIN)
                for t in ids
            )
        )
        assert all(r.status_code == 200 for r in done)
        await eventually(lambda: heard)
        await asyncio.sleep(0.2)
        assert 1 <= len(heard) < len(ids)
    finally:
        await listener.close()


async def test_a_wake_up_that_fails_does_not_fail_the_committed_write(client, dsn) -> None:
    tenant = (await client.post("/v1/admin/tenants", json={"name": "w"}, headers=ADMIN)).json()
    key = bearer(tenant["apiKey"])

    def closed_loop(_lane: object) -> None:
        raise RuntimeError("Event loop is closed")

    client._transport.app.state.signals.wake_locally(closed_loop)
    heard: list[int] = []
    listener = await asyncpg.connect(dsn)
    await listener.add_listener(OUTBOX_CHANNEL, lambda *_: heard.append(1))
    try:
        r = await client.post("/v1/tasks", json={"type": "t", "callbackUrl": HOOK}, headers=key)
        tid = r.json()["id"]
        r = await client.post(f"/v1/tasks/{tid}/complete", json={"status": "failed"}, headers=ADMIN)
        assert r.status_code == 200 and r.json()["status"] == "failed"
        await eventually(lambda: heard)  # the other dispatchers were still woken
    finally:
        await listener.close()


async def test_a_dispatcher_woken_directly_ignores_its_own_processs_notify(
    client, dsn, runtime, pool
) -> None:
    """``serve``: the API wakes its own dispatcher at each commit and names itself in
    the NOTIFY it sends for the others, which that dispatcher then does not act on a
    second time; a NOTIFY of anyone else (another API process, an executor) it does."""
    tenant = (await client.post("/v1/admin/tenants", json={"name": "s"}, headers=ADMIN)).json()
    app = client._transport.app
    signals = app.state.signals
    payloads: list[str] = []
    listener = await asyncpg.connect(dsn)
    await listener.add_listener(OUTBOX_CHANNEL, lambda _c, _pid, _ch, p: payloads.append(p))
    d = dispatcher(runtime, pool)
    d.woken_by = signals.origin
    signals.wake_locally(d.wake)
    try:
        tid = (
            await client.post(
                "/v1/tasks",
                json={"type": "t", "callbackUrl": HOOK},
                headers=bearer(tenant["apiKey"]),
            )
        ).json()["id"]
        d._looked = False
        await client.post(f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN)
        # Woken directly at the commit, with the event's lane: claimed from at once,
        # no look at every lane first.
        assert not d._looked
        assert d._hinted == {(destination_host(HOOK), tenant["id"]): 1}
        await eventually(lambda: payloads == [signals.origin])
        d._looked = False
        d._notified(payloads[0])
        assert not d._looked  # its own process's NOTIFY: already looked
        d._notified("")  # an executor's completion, or an older release's API
        assert d._looked
        d._looked = False
        d._notified("api-another")
        assert d._looked
    finally:
        await listener.close()
