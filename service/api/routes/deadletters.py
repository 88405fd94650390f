"""Ops routes for dead letters: list, show with history, replay one, replay in bulk."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hookrelay.outbox import ops
from hookrelay.outbox.models import iso
from hookrelay.outbox.ops import DeadLetterFilter, get_dead_letter, list_dead_letters, to_resource
from hookrelay.outbox.tasks import Cursor
from hookrelay.service.api import validation
from hookrelay.service.api.auth import require_admin
from hookrelay.service.api.bodies import read_json
from hookrelay.service.api.errors import Unprocessable

FILTER_FIELDS = {"tenant", "since", "until", "eventType"}
MAX_REASON = 500


def _filter(source: QueryParams | dict[str, Any]) -> DeadLetterFilter:
    def text(name: str) -> str | None:
        value = source.get(name)
        if value is not None and not isinstance(value, str):
            raise Unprocessable(f"{name} must be a string")
        return value

    return DeadLetterFilter(
        tenant_id=text("tenant"),
        since=validation.timestamp("since", text("since")),
        until=validation.timestamp("until", text("until")),
        event_type=text("eventType"),
    )


async def index(request: Request) -> Response:
    await require_admin(request)
    q = request.query_params
    cursor = validation.decode_cursor(q.get("cursor"))
    async with request.app.state.pool.acquire() as conn:
        rows, nxt = await list_dead_letters(
            conn,
            _filter(q),
            after=(cursor.updated_at, cursor.id) if cursor else None,
            limit=validation.limit(q.get("limit")),
        )
    return JSONResponse(
        {
            "data": [to_resource(r) for r in rows],
            "nextCursor": validation.encode_cursor(Cursor(*nxt) if nxt else None),
        }
    )


async def show(request: Request) -> Response:
    await require_admin(request)
    async with request.app.state.pool.acquire() as conn:
        row, history = await get_dead_letter(conn, request.path_params["event_id"])
    body = to_resource(row)
    body["replayedAt"] = iso(row.replayed_at)
    body["replayedBy"] = row.replayed_by
    body["attemptHistory"] = [a.to_resource() for a in history]
    return JSONResponse(body)


def _reason(body: Any) -> str:
    reason = body.get("reason", ops.NO_REASON) if isinstance(body, dict) else ops.NO_REASON
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON:
        raise Unprocessable(f"reason must be a string of 1-{MAX_REASON} characters")
    return reason.strip()


async def replay(request: Request) -> Response:
    await require_admin(request)
    body = await read_json(request, required=False) or {}
    if not isinstance(body, dict) or set(body) - {"reason"}:
        raise Unprocessable("body must be empty or an object with only: reason")
    event_id = request.path_params["event_id"]
    async with request.app.state.pool.acquire() as conn:
        await ops.replay_audited(conn, event_id, actor="admin", reason=_reason(body))
    return JSONResponse({"replayed": 1, "eventId": event_id}, status_code=202)


async def replay_bulk(request: Request) -> Response:
    await require_admin(request)
    body = await read_json(request, required=False) or {}
    if not isinstance(body, dict) or set(body) - FILTER_FIELDS - {"reason"}:
        allowed = ", ".join(sorted(FILTER_FIELDS | {"reason"}))
        raise Unprocessable(f"body must be an object with only: {allowed}")
    reason = _reason(body)
    # Filters may come in the body or the query string, as for the listing.
    filters = {k: v for k, v in body.items() if k != "reason"}
    flt = _filter({**dict(request.query_params), **filters})
    async with request.app.state.pool.acquire() as conn:
        total = await ops.bulk_replay(conn, flt, actor="admin", reason=reason)
    return JSONResponse({"replayed": total}, status_code=202 if total else 200)


routes = [
    Route("/v1/admin/dead-letters", index, methods=["GET"]),
    Route("/v1/admin/dead-letters/replay", replay_bulk, methods=["POST"]),
    Route("/v1/admin/dead-letters/{event_id}", show, methods=["GET"]),
    Route("/v1/admin/dead-letters/{event_id}/replay", replay, methods=["POST"]),
]
