"""``hookrelay.client.AsyncClient`` against a live ``hookrelay serve``: every call, a lost
answer, waits, and the tenant stream across a restart and through a reset."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from hookrelay import outbox
from hookrelay.client import (
    AsyncClient,
    Conflict,
    InvalidRequest,
    NotFound,
    TaskEvent,
    Unauthorized,
    WaitTimeout,
)
from hookrelay.outbox.store import changes
from hookrelay.receiver import verify
from tests.support import ADMIN_TOKEN, LosingProxy, ServeProcess, WebhookSink, eventually

pytestmark = pytest.mark.anyio
HOOK = "http://127.0.0.1:9/hook"


class Recorder(httpx.AsyncHTTPTransport):
    """The real transport, keeping each request sent and each status answered."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []
        self.statuses: list[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        response = await super().handle_async_request(request)
        self.statuses.append(response.status_code)
        return response


@pytest.fixture
def partner(hookrelay_serve: ServeProcess) -> dict[str, Any]:
    return hookrelay_serve.tenant()


@pytest.fixture
async def client(hookrelay_serve, partner) -> AsyncIterator[AsyncClient]:
    recorder = Recorder()
    url, key = hookrelay_serve.url, partner["apiKey"]
    async with AsyncClient(url, key, admin_token=ADMIN_TOKEN, transport=recorder) as c:
        c.recorder = recorder  # type: ignore[attr-defined]
        yield c


@contextlib.asynccontextmanager
async def collecting(
    events: AsyncGenerator[TaskEvent, None],
) -> AsyncIterator[list[TaskEvent]]:
    """Reads ``events`` in a task of its own into a list, until the block ends."""
    got: list[TaskEvent] = []

    async def read() -> None:
        async with contextlib.aclosing(events) as stream:
            async for event in stream:
                got.append(event)

    reader = asyncio.create_task(read())
    try:
        yield got
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


def opened(client: AsyncClient, path: str) -> bool:
    """Whether a request to ``path`` has had its answer's head (a stream is open)."""
    recorder = client.recorder  # type: ignore[attr-defined]
    return any(r.url.path == path for r in recorder.sent[: len(recorder.statuses)])


async def test_submit_get_and_a_lost_answer(client, hookrelay_serve, partner) -> None:
    task = await client.submit("render", input={"page": 1}, callback_url=HOOK)
    first = await client.get(task.id)
    assert first == task
    # Unchanged: the server answered 304 and the client gave back what it had.
    assert (await client.get(task.id)) is first and client.recorder.statuses[-1] == 304
    proxy = LosingProxy(hookrelay_serve.port)
    try:
        async with AsyncClient(proxy.url, partner["apiKey"]) as lossy:
            again = await lossy.submit("render", callback_url=HOOK, idempotency_key="k-1")
    finally:
        proxy.close()
    assert proxy.lost == 1
    ids = [t.id async for t in client.tasks()]
    assert ids == [task.id, again.id]  # the lost answer made no second task


async def test_a_lost_answer_to_start_takes_the_409_of_its_own_outcome(
    client, hookrelay_serve
) -> None:
    task = await client.submit("t", callback_url=HOOK)
    proxy = LosingProxy(hookrelay_serve.port)
    try:
        async with AsyncClient(proxy.url, admin_token=ADMIN_TOKEN) as lossy:
            running = await lossy.start(task.id)
    finally:
        proxy.close()
    assert proxy.lost == 1 and (running.status, running.version) == ("running", 2)


async def test_wait_returns_when_the_task_completes_meanwhile(client) -> None:
    task = await client.submit("t", callback_url=HOOK)
    waiting = asyncio.create_task(client.wait(task.id, timeout=30))
    await eventually(
        lambda: any("wait" in r.url.params for r in client.recorder.sent), what="a long poll"
    )
    await client.complete(task.id, "succeeded", result={"n": 1})
    done = await asyncio.wait_for(waiting, 30)
    assert (done.status, done.result) == ("succeeded", {"n": 1})
    with pytest.raises(WaitTimeout) as late:
        await client.wait((await client.submit("t", callback_url=HOOK)).id, timeout=0.2)
    assert late.value.task is not None and late.value.task.status == "queued"


async def test_follow_a_task_to_its_end(client) -> None:
    task = await client.submit("t", callback_url=HOOK)
    async with collecting(client.follow(task.id)) as events:
        await eventually(lambda: events, what="the current state")
        await client.start(task.id)
        await client.progress(task.id, 10)
        await client.complete(task.id, "failed", error={"code": "x"})
        await eventually(lambda: len(events) == 4, what="every change")
    assert [(e.id, e.kind) for e in events] == [
        (1, "change"),
        (2, "change"),
        (3, "progress"),
        (4, "change"),
    ]
    # Resuming from the final version: nothing more (the server answers 204).
    assert [e async for e in client.follow(task.id, last_event_id=4)] == []
    with pytest.raises(NotFound):
        [e async for e in client.follow("task_nope")]


async def db_changes(dsn: str, tenant_id: str, steps) -> None:
    """Run ``steps(conn)`` on the database directly, as an executor would."""
    conn = await asyncpg.connect(dsn)
    try:
        await steps(conn)
    finally:
        await conn.close()


@pytest.mark.slow
async def test_follow_all_resumes_across_a_restart_with_no_gap(
    client, hookrelay_serve, module_dsn, partner
) -> None:
    a = await client.submit("t", callback_url=HOOK)
    async with collecting(client.follow_all()) as events:
        await eventually(lambda: opened(client, "/v1/events"), what="the stream open")
        b = await client.submit("t", callback_url=HOOK)
        await eventually(lambda: events, what="the first change")
        await asyncio.to_thread(hookrelay_serve.stop)

        async def while_down(conn: asyncpg.Connection) -> None:
            await outbox.start_task(conn, a.id)
            await outbox.report_progress(conn, a.id, 30)
            await outbox.complete_task(conn, b.id, "cancelled")

        try:
            await db_changes(module_dsn, partner["id"], while_down)
        finally:
            await asyncio.to_thread(hookrelay_serve.start)
        await client.complete(a.id, "succeeded")
        await eventually(lambda: len(events) == 5, timeout=30, what="every change")
    assert [e.id for e in events] == [2, 3, 4, 5, 6]  # the tenant's sequence, no gap
    assert [(e.task.id, e.task.version, e.kind) for e in events] == [
        (b.id, 1, "change"),
        (a.id, 2, "change"),
        (a.id, 3, "progress"),
        (b.id, 2, "change"),
        (a.id, 4, "change"),
    ]


@pytest.mark.slow
async def test_follow_all_reconciles_a_reset_through_the_listing(
    client, hookrelay_serve, module_dsn, partner
) -> None:
    a = await client.submit("t", callback_url=HOOK)
    b = await client.submit("t", callback_url=HOOK)
    async with collecting(client.follow_all()) as events:
        await eventually(lambda: opened(client, "/v1/events"), what="the stream open")
        await client.start(a.id)
        await eventually(lambda: events, what="the first change")
        await asyncio.to_thread(hookrelay_serve.stop)

        async def while_down(conn: asyncpg.Connection) -> None:
            await outbox.complete_task(conn, a.id, "succeeded")
            await outbox.start_task(conn, b.id)
            await outbox.report_progress(conn, b.id, 50)
            # Past the retention window: the log keeps only the last change (seq 6,
            # b's progress), so the stream resumed after 3 must reset. (Numbered first,
            # as retention only ever purges what is numbered.)
            await changes.number_pending(conn)
            await conn.execute(
                "DELETE FROM task_changes WHERE tenant_id = $1 AND seq <= 5", partner["id"]
            )

        try:
            await db_changes(module_dsn, partner["id"], while_down)
        finally:
            await asyncio.to_thread(hookrelay_serve.start)
        await eventually(lambda: len(events) == 3, timeout=30, what="the reconciliation")
        await client.complete(b.id, "succeeded")
        await eventually(lambda: len(events) == 4, what="the stream after it")
    got = [(e.task.id, e.task.version, e.id, e.reconciled) for e in events]
    assert got[0] == (a.id, 2, 3, False)
    # What the lost changes left, from the listing (in its order), once each: the
    # log's own copy of b's progress (seq 6) is not handed out again.
    assert sorted(got[1:3]) == sorted([(a.id, 3, None, True), (b.id, 3, None, True)])
    assert events[1].task.updated_at <= events[2].task.updated_at
    assert got[3] == (b.id, 4, 7, False)  # then the stream goes on after the reset


async def test_every_other_call(client, partner, hookrelay_serve) -> None:
    sink = WebhookSink()
    try:
        task = await client.submit("t", callback_url=sink.url)
        await client.start(task.id)
        await client.complete(task.id, "succeeded", result={"ok": 1})

        async def delivered() -> bool:
            found = await client.get(task.id)
            return found.delivery is not None and found.delivery.status == "delivered"

        await eventually(delivered, what="delivered")
        (attempt,) = await client.deliveries(task.id)
        assert attempt.status_code == 204
        redelivered = await client.redeliver(task.id)
        assert redelivered.delivery is not None and redelivered.delivery.status == "pending"
        ping = await client.test_event(sink.url)

        async def pinged() -> bool:
            return bool((await client.get_test_event(ping.event_id)).status == "delivered")

        await eventually(pinged, what="the ping delivered")
        await eventually(lambda: len(sink.received) == 3, what="three webhooks")
    finally:
        sink.close()
    ids = [verify(h, b, secrets=[partner["signingSecret"]]).id for h, b in sink.received]
    assert sorted(ids) == sorted([attempt.event_id, attempt.event_id, ping.event_id])
    other = await client.submit("t", callback_url=HOOK)
    assert (await client.cancel(other.id)).status == "cancelled"
    assert [t.id async for t in client.tasks(status="cancelled")] == [other.id]
    tenant = hookrelay_serve.tenant("both")
    async with AsyncClient(hookrelay_serve.url, tenant["apiKey"]) as both:
        assert await both.public_keys() == [tenant["publicKey"]]
        link = await both.portal_link(read_only=True)
    assert link.url.startswith(f"{hookrelay_serve.url}/portal/open?token=hrp_")
    async with httpx.AsyncClient() as browser:
        assert (await browser.get(link.url)).status_code == 303
        assert (await browser.get(link.url)).status_code == 410


async def test_errors_as_the_server_answers_them(client, hookrelay_serve) -> None:
    with pytest.raises(NotFound):
        await client.get("task_nope")
    with pytest.raises(InvalidRequest) as invalid:
        await client.submit("not a type!", callback_url=HOOK)
    assert invalid.value.field == "type"
    task = await client.submit("t", callback_url=HOOK)
    await client.cancel(task.id)
    with pytest.raises(Conflict) as conflict:
        await client.complete(task.id, "succeeded")
    assert conflict.value.task is not None and conflict.value.task.status == "cancelled"
    async with AsyncClient(hookrelay_serve.url, "hrk_wrong") as stranger:
        with pytest.raises(Unauthorized):
            await stranger.get(task.id)
    assert "hrk_" not in repr(client)
