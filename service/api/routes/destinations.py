"""``GET /v1/admin/destinations``: per-host health as the circuit breaker sees it."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookrelay.outbox.store import destinations
from hookrelay.service.api import shapes
from hookrelay.service.api.auth import require_admin
from hookrelay.service.api.bodies import answer, read_query


async def index(request: Request) -> Response:
    await require_admin(request)
    limit = read_query(request, shapes.LimitQuery).limit
    async with request.app.state.pool.acquire() as conn:
        rows = await destinations.list_destinations(conn, limit=limit)
    return answer(
        shapes.Destinations(
            data=[
                shapes.Destination(
                    host=d.host,
                    state=d.state,
                    consecutive_failures=d.consecutive_failures,
                    last_error=d.last_error,
                    last_failure_at=d.last_failure_at,
                    opened_at=d.opened_at,
                    next_probe_at=d.probe_at,
                    held_deliveries=d.held,
                )
                for d in rows
            ]
        )
    )


routes = [Route("/v1/admin/destinations", index, methods=["GET"])]
