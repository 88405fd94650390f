"""Ops routes for dead letters: list, show with history, replay one, replay in bulk."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookrelay.outbox import ops
from hookrelay.outbox.ops import DeadLetterFilter, get_dead_letter, list_dead_letters
from hookrelay.outbox.tasks import Cursor
from hookrelay.service.api import shapes, validation
from hookrelay.service.api.auth import require_admin
from hookrelay.service.api.bodies import answer, read_body, read_query


def _filter(given: shapes.DeadLetterFilter) -> DeadLetterFilter:
    return DeadLetterFilter(
        tenant_id=given.tenant,
        since=validation.timestamp("since", given.since),
        until=validation.timestamp("until", given.until),
        event_type=given.event_type,
    )


async def index(request: Request) -> Response:
    await require_admin(request)
    q = read_query(request, shapes.DeadLetterQuery)
    cursor = validation.decode_cursor(q.cursor)
    async with request.app.state.pool.acquire() as conn:
        rows, nxt = await list_dead_letters(
            conn,
            _filter(q),
            after=(cursor.updated_at, cursor.id) if cursor else None,
            limit=q.limit,
        )
    page = shapes.DeadLetterPage(
        data=[shapes.DeadLetter.of(r) for r in rows],
        next_cursor=validation.encode_cursor(Cursor(*nxt) if nxt else None),
    )
    return answer(page)


async def show(request: Request) -> Response:
    await require_admin(request)
    async with request.app.state.pool.acquire() as conn:
        row, history = await get_dead_letter(conn, request.path_params["event_id"])
    return answer(shapes.DeadLetterDetail.with_history(row, history))


async def replay(request: Request) -> Response:
    await require_admin(request)
    body = await read_body(request, shapes.ReplayBody, required=False)
    event_id = request.path_params["event_id"]
    reason = shapes.strip_blank(body.reason)
    async with request.app.state.pool.acquire() as conn:
        await ops.replay_audited(conn, event_id, actor="admin", reason=reason)
    return answer(shapes.Replayed(replayed=1, event_id=event_id), 202)


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


routes = [
    Route("/v1/admin/dead-letters", index, methods=["GET"]),
    Route("/v1/admin/dead-letters/replay", replay_bulk, methods=["POST"]),
    Route("/v1/admin/dead-letters/{event_id}", show, methods=["GET"]),
    Route("/v1/admin/dead-letters/{event_id}/replay", replay, methods=["POST"]),
]
