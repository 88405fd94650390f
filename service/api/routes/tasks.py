"""Partner and executor routes on ``/v1/tasks``."""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookrelay.outbox import tasks as outbox_tasks
from hookrelay.outbox import tracing
from hookrelay.outbox.models import Task
from hookrelay.outbox.tasks import Idempotency, NewTask, get_task
from hookrelay.service.api import listing, shapes, validation
from hookrelay.service.api.auth import Caller, caller, require_admin, require_tenant
from hookrelay.service.api.bodies import answer, read_body, read_query
from hookrelay.service.api.callback_url import check_callback_url
from hookrelay.service.api.errors import NotFound

RETRY_AFTER_S = "1"


def task_response(task: Task, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    headers = {"ETag": task.etag, **(headers or {})}
    if not task.terminal:
        headers["Retry-After"] = RETRY_AFTER_S
    return answer(task.resource(), status, headers)


async def submit(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    key = validation.idempotency_key(request.headers.get("idempotency-key"))
    body = await read_body(request, shapes.SubmitBody)
    state = request.app.state
    spec = NewTask(
        type=body.type,
        callback_url=await check_callback_url(
            body.callback_url, state.address_policy, state.submit_resolver
        ),
        input=body.input,
        metadata=body.metadata,
        timeout_s=body.timeout_seconds,
        heartbeat_timeout_s=body.heartbeat_timeout_seconds,
        on_timeout=None if body.on_timeout is None else msgspec.to_builtins(body.on_timeout),
        callback_headers=body.callback_headers,
        ordering_key=body.ordering_key,
        # The submitter's W3C trace context; a malformed one is ignored, as the
        # specification says (the task then starts a trace of its own).
        trace=tracing.parse(
            request.headers.getlist("traceparent"), request.headers.getlist("tracestate")
        ),
    )
    idem = Idempotency(key, validation.canonical_hash(body)) if key else None
    task, created = await state.writes.submit(tenant_id, spec, idem)
    headers = {"Location": f"/v1/tasks/{task.id}"}
    if created:
        request.app.state.signals.committed(task)
    else:
        headers["Idempotent-Replayed"] = "true"
    return task_response(task, 202, headers)


async def _visible_task(request: Request, who: Caller | None = None) -> Task:
    """The path's task as this caller may see it: admins any, tenants their own."""
    who = who or await caller(request)
    async with request.app.state.pool.acquire() as conn:
        task = await get_task(conn, request.path_params["task_id"], tenant_id=who.tenant_id)
    if task is None:
        raise NotFound("task not found")
    return task


async def _wait_for_change(
    request: Request, who: Caller, task: Task, changed: asyncio.Event, wait: float
) -> Task:
    """The task once it differs from ``task``, or as it is when ``wait`` runs out.

    A wake-up is a hint, not a promise (one notification may name several
    changes, a reconnect wakes every waiter): the task is read again and the wait
    goes on while it is unchanged.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while (left := deadline - loop.time()) > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), left)
        changed.clear()
        now = await _visible_task(request, who)
        if now.etag != task.etag or request.app.state.watcher.released:
            return now
    return task


def _matches(task: Task, if_none_match: str | None) -> bool:
    if not if_none_match:
        return False
    return task.etag in {t.strip() for t in if_none_match.split(",")}


async def show(request: Request) -> Response:
    wait = read_query(request, shapes.WaitQuery).wait
    if_none_match = request.headers.get("if-none-match")
    if wait:
        # Subscribe before the first read, so a change between the read and
        # the wait cannot be missed. No connection is held while waiting.
        who = await caller(request)
        with request.app.state.watcher.watch(request.path_params["task_id"]) as changed:
            task = await _visible_task(request, who)
            if not task.terminal and (if_none_match is None or _matches(task, if_none_match)):
                task = await _wait_for_change(request, who, task, changed, wait)
    else:
        task = await _visible_task(request)
    if _matches(task, if_none_match):
        headers = {"ETag": task.etag}
        if not task.terminal:
            headers["Retry-After"] = RETRY_AFTER_S
        return Response(status_code=304, headers=headers)
    return task_response(task)


async def index(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    q = read_query(request, shapes.TaskListQuery)
    query = listing.PageQuery(
        tenant_id=tenant_id,
        status=q.status,
        updated_after=validation.timestamp("updatedAfter", q.updated_after),
        after=validation.decode_cursor(q.cursor),
        limit=q.limit,
        fields=listing.selected(q.fields),
        max_bytes=request.app.state.settings.max_page_bytes,
    )
    async with request.app.state.pool.acquire() as conn:
        parts, nxt = await listing.task_page(conn, query)
    body = listing.page_body(parts, validation.encode_cursor(nxt))
    return Response(body, media_type="application/json")


# The API's own writes are one statement each, under autocommit, coalesced with the
# writes of the same kind arriving with them (outbox.tasks.group_commit), and send no
# NOTIFY: ``_answer`` signals after the commit instead (service/live/wakeups.py says why).


async def start(request: Request) -> Response:
    await require_admin(request)
    return _answer(request, await request.app.state.writes.start(request.path_params["task_id"]))


async def complete(request: Request) -> Response:
    await require_admin(request)
    body = await read_body(request, shapes.CompleteBody)
    writes = request.app.state.writes
    task = await writes.complete(
        request.path_params["task_id"], body.status, body.result, body.error
    )
    return _answer(request, task)


async def progress(request: Request) -> Response:
    await require_admin(request)
    body = await read_body(request, shapes.ProgressBody)
    writes = request.app.state.writes
    task = await writes.progress(request.path_params["task_id"], body.percent, body.message)
    return _answer(request, task)


async def cancel(request: Request) -> Response:
    who = await caller(request)
    await read_body(request, shapes.NoBody, required=False)
    writes = request.app.state.writes
    task = await writes.cancel(request.path_params["task_id"], tenant_id=who.tenant_id)
    return _answer(request, task)


def _answer(request: Request, task: Task) -> Response:
    request.app.state.signals.committed(task)
    return task_response(task)


async def deliveries(request: Request) -> Response:
    task = await _visible_task(request)
    async with request.app.state.pool.acquire() as conn:
        log = await outbox_tasks.attempts(conn, task.id)
    return answer(
        shapes.Deliveries(task_id=task.id, event_id=task.event_id, data=[a.resource() for a in log])
    )


async def redeliver(request: Request) -> Response:
    who = await caller(request)
    await read_body(request, shapes.NoBody, required=False)
    by = "admin" if who.is_admin else f"tenant:{who.tenant_id}"
    async with request.app.state.pool.acquire() as conn:
        task = await outbox_tasks.redeliver(
            conn, request.path_params["task_id"], tenant_id=who.tenant_id, by=by
        )
    return task_response(task, 202)


routes = [
    Route("/v1/tasks", submit, methods=["POST"]),
    Route("/v1/tasks", index, methods=["GET"]),
    Route("/v1/tasks/{task_id}", show, methods=["GET"]),
    Route("/v1/tasks/{task_id}/start", start, methods=["POST"]),
    Route("/v1/tasks/{task_id}/complete", complete, methods=["POST"]),
    Route("/v1/tasks/{task_id}/cancel", cancel, methods=["POST"]),
    Route("/v1/tasks/{task_id}/progress", progress, methods=["POST"]),
    Route("/v1/tasks/{task_id}/deliveries", deliveries, methods=["GET"]),
    Route("/v1/tasks/{task_id}/redeliver", redeliver, methods=["POST"]),
]
