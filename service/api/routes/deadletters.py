"""Dead letters: list, show with history, replay one, replay in bulk.

Ops see every tenant's under ``/v1/admin/dead-letters``; a partner sees and replays
its own under ``/v1/dead-letters`` with its API key, through the same code with the
tenant as the filter (another tenant's letter is a 404) and as the audit's actor.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookrelay.outbox import ops
from hookrelay.outbox.ops import DeadLetterFilter, get_dead_letter, list_dead_letters
from hookrelay.outbox.tasks import Cursor
from hookrelay.service.api import shapes, validation
from hookrelay.service.api.auth import require_admin, require_tenant
from hookrelay.service.api.bodies import answer, read_body, read_query


def _filter(
    given: shapes.DeadLetterFilter | shapes.OwnDeadLetterFilter, tenant_id: str | None = None
) -> DeadLetterFilter:
    return DeadLetterFilter(
        tenant_id=given.tenant if isinstance(given, shapes.DeadLetterFilter) else tenant_id,
        since=validation.timestamp("since", given.since),
        until=validation.timestamp("until", given.until),
        event_type=given.event_type,
    )


async def _page(
    request: Request, flt: DeadLetterFilter, cursor_raw: str | None, limit: int
) -> Response:
    cursor = validation.decode_cursor(cursor_raw)
    async with request.app.state.pool.acquire() as conn:
        rows, nxt = await list_dead_letters(
            conn,
            flt,
            after=(cursor.updated_at, cursor.id) if cursor else None,
            limit=limit,
        )
    page = shapes.DeadLetterPage(
        data=[shapes.DeadLetter.of(r) for r in rows],
        next_cursor=validation.encode_cursor(Cursor(*nxt) if nxt else None),
    )
    return answer(page)


async def index(request: Request) -> Response:
    await require_admin(request)
    q = read_query(request, shapes.DeadLetterQuery)
    return await _page(request, _filter(q), q.cursor, q.limit)


async def own_index(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    q = read_query(request, shapes.OwnDeadLetterQuery)
    return await _page(request, _filter(q, tenant_id), q.cursor, q.limit)


async def _show(request: Request, tenant_id: str | None) -> Response:
    async with request.app.state.pool.acquire() as conn:
        row, history = await get_dead_letter(
            conn, request.path_params["event_id"], tenant_id=tenant_id
        )
    return answer(shapes.DeadLetterDetail.with_history(row, history))


async def show(request: Request) -> Response:
    await require_admin(request)
    return await _show(request, None)


async def own_show(request: Request) -> Response:
    return await _show(request, await require_tenant(request))


async def _replay(request: Request, tenant_id: str | None) -> Response:
    body = await read_body(request, shapes.ReplayBody, required=False)
    event_id = request.path_params["event_id"]
    reason = shapes.strip_blank(body.reason)
    actor = "admin" if tenant_id is None else ops.tenant_actor(tenant_id)
    async with request.app.state.pool.acquire() as conn:
        await ops.replay_audited(conn, event_id, actor=actor, reason=reason, tenant_id=tenant_id)
    return answer(shapes.Replayed(replayed=1, event_id=event_id), 202)


async def replay(request: Request) -> Response:
    await require_admin(request)
    return await _replay(request, None)


async def own_replay(request: Request) -> Response:
    return await _replay(request, await require_tenant(request))


async def replay_bulk(request: Request) -> Response:
    await require_admin(request)
    body = await read_body(request, shapes.BulkReplayBody, required=False)
    # Filters may come in the body or the query string, as for the listing; the body's win.
    q = read_query(request, shapes.DeadLetterFilter)
    given = shapes.DeadLetterFilter(
        tenant=q.tenant if body.tenant is None else body.tenant,
        since=q.since if body.since is None else body.since,
        until=q.until if body.until is None else body.until,
        event_type=q.event_type if body.event_type is None else body.event_type,
    )
    reason = shapes.strip_blank(body.reason)
    async with request.app.state.pool.acquire() as conn:
        total = await ops.bulk_replay(conn, _filter(given), actor="admin", reason=reason)
    return answer(shapes.Replayed(replayed=total), 202 if total else 200)


async def own_replay_bulk(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    body = await read_body(request, shapes.OwnBulkReplayBody, required=False)
    # As for ops: the filters in the body or the query string, the body's win.
    q = read_query(request, shapes.OwnReplayQuery)
    given = shapes.OwnDeadLetterFilter(
        since=q.since if body.since is None else body.since,
        until=q.until if body.until is None else body.until,
        event_type=q.event_type if body.event_type is None else body.event_type,
    )
    flt = _filter(given, tenant_id)
    async with request.app.state.pool.acquire() as conn:
        if q.dry_run:
            return answer(shapes.Replayed(replayed=await ops.preview_replay(conn, flt)))
        total = await ops.bulk_replay(
            conn, flt, actor=ops.tenant_actor(tenant_id), reason=shapes.strip_blank(body.reason)
        )
    return answer(shapes.Replayed(replayed=total), 202 if total else 200)


routes = [
    Route("/v1/admin/dead-letters", index, methods=["GET"]),
    Route("/v1/admin/dead-letters/replay", replay_bulk, methods=["POST"]),
    Route("/v1/admin/dead-letters/{event_id}", show, methods=["GET"]),
    Route("/v1/admin/dead-letters/{event_id}/replay", replay, methods=["POST"]),
    Route("/v1/dead-letters", own_index, methods=["GET"]),
    Route("/v1/dead-letters/replay", own_replay_bulk, methods=["POST"]),
    Route("/v1/dead-letters/{event_id}", own_show, methods=["GET"]),
    Route("/v1/dead-letters/{event_id}/replay", own_replay, methods=["POST"]),
]
