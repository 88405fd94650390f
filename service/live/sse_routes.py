"""Server-Sent Events: ``GET /v1/tasks/{id}/events`` (one task) and ``GET /v1/events`` (all).

Both come from the process's stream hub, so a client costs no database
connection or thread while it waits. Browsers' EventSource cannot send an
Authorization header: they use the WebSocket route or fetch() streaming.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookrelay.outbox.models import Task
from hookrelay.outbox.store import changes
from hookrelay.outbox.tasks import get_task
from hookrelay.service.api import request_guard as guard
from hookrelay.service.api.auth import require_tenant
from hookrelay.service.api.errors import NotFound
from hookrelay.service.live import Change, Reset, StreamHub, Subscription
from hookrelay.service.live.changes import render
from hookrelay.service.live.sse import EventStream, frame, items, reset_frame, task_frame

MAX_ID = 2**62  # fits a bigint with room to spare, whatever the client sends
REPLAY_PAGE = 500


def last_event_id(request: Request) -> int | None:
    """``Last-Event-ID``: an integer, else 400 (EventSource sends back the id we gave)."""
    raw = request.headers.get("last-event-id")
    if raw is None or raw.strip() == "":
        return None
    return guard.ascii_int("Last-Event-ID", raw.strip(), 0, MAX_ID)


async def tenant_events(request: Request) -> Response:
    return await tenant_stream(request, await require_tenant(request))


async def tenant_stream(request: Request, tenant_id: str) -> Response:
    """Every change of ``tenant_id``'s tasks, from ``Last-Event-ID`` on (the partner
    portal's live list opens it too, for the tenant of its session)."""
    after = last_event_id(request)
    hub: StreamHub = request.app.state.hub
    sub = await hub.open(tenant_id, after=after)
    sub.watch_all()
    heartbeat = request.app.state.settings.stream_heartbeat_s
    return EventStream(_tenant_stream(sub, heartbeat), sub.close)


async def _tenant_stream(sub: Subscription, heartbeat_s: float) -> AsyncIterator[bytes]:
    # Where the stream starts, as an id with no event: a client that reconnects
    # before any change still resumes from here, not from "now".
    yield f"id: {sub.position}\n\n".encode()
    async for item in items(sub, heartbeat_s):
        if isinstance(item, bytes):
            yield item
        elif isinstance(item, Reset):
            yield reset_frame(item.to_resource(), item.resume_after)
        else:
            yield task_frame(item, item.seq)


async def task_events(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    after = last_event_id(request)
    task_id = request.path_params["task_id"]
    hub: StreamHub = request.app.state.hub
    # Live first, then the read: a change committed between the two is not missed.
    sub = await hub.open(tenant_id)
    try:
        sub.watch([task_id])
        async with request.app.state.pool.acquire() as conn:
            # Every change committed so far gets its number first: the replay below
            # then finds each version up to the task's current one in the log.
            await changes.number_pending(conn)
            task = await get_task(conn, task_id, tenant_id=tenant_id)
    except BaseException:
        sub.close()
        raise
    if task is None:
        sub.close()
        raise NotFound("task not found")
    if task.terminal and after == task.version:
        # The client has the final state: 204 is what tells EventSource to stop
        # reconnecting (an empty 200 would have it come back every few seconds).
        sub.close()
        return Response(status_code=204)
    heartbeat = request.app.state.settings.stream_heartbeat_s
    stream = _task_stream(request, sub, task, after, heartbeat)
    return EventStream(stream, sub.close)


async def _task_stream(
    request: Request, sub: Subscription, task: Task, after: int | None, heartbeat_s: float
) -> AsyncIterator[bytes]:
    sent = after or 0  # the last version the client has
    if after is not None and after > task.version:
        # Not a version of this task (another task's id, another database): waiting
        # for it would send nothing, perhaps for good. Say so, then start over.
        unknown = {
            "code": "unknown_position",
            "message": f"version {after} is beyond this task's version {task.version}; "
            "the current state follows",
            "lastEventId": after,
            "resumeAfter": task.version,
        }
        yield reset_frame(unknown)
        after, sent = None, 0
    if after is None or after < task.version:
        async for chunk, version, terminal in _replay(request, task, after):
            yield chunk
            sent = max(sent, version)
            if terminal:
                return
    if task.terminal:
        return
    async for item in items(sub, heartbeat_s):
        if isinstance(item, bytes):
            yield item
        elif isinstance(item, Change) and item.version > sent:
            sent = item.version
            yield task_frame(item, item.version)
            if item.terminal:
                return


async def _replay(
    request: Request, task: Task, after: int | None
) -> AsyncIterator[tuple[bytes, int, bool]]:
    """(event, version, terminal): the current state, or, resuming, each version after
    ``after`` from the log (a reset event and the current state if it lacks them)."""
    if after is not None:
        async with request.app.state.pool.acquire() as conn:
            oldest = await changes.task_oldest_version(conn, task_id=task.id)
        if oldest is not None and oldest <= after + 1:
            while after < task.version:
                async with request.app.state.pool.acquire() as conn:
                    page = await changes.task_changes_after(
                        conn, task_id=task.id, version=after, limit=REPLAY_PAGE
                    )
                if not page:
                    break
                for logged in page:
                    change = Change.from_logged(logged)
                    yield task_frame(change, change.version), change.version, change.terminal
                after = page[-1].task.version
            return
        expired = {
            "code": "history_expired",
            "message": f"versions after {after} are no longer kept (past the stream "
            "retention window); the current state follows",
            "lastEventId": after,
            "resumeAfter": task.version,
        }
        yield reset_frame(expired), after, False
    yield frame("task", render(task.to_resource()), task.version), task.version, task.terminal


routes = [
    Route("/v1/events", tenant_events, methods=["GET"]),
    Route("/v1/tasks/{task_id}/events", task_events, methods=["GET"]),
]
