"""``GET /v1/admin/destinations``: per-host health as the circuit breaker sees it."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hookrelay.outbox.models import iso
from hookrelay.outbox.store import destinations
from hookrelay.service.api import validation
from hookrelay.service.api.auth import require_admin


async def index(request: Request) -> Response:
    await require_admin(request)
    limit = validation.limit(request.query_params.get("limit"))
    async with request.app.state.pool.acquire() as conn:
        rows = await destinations.list_destinations(conn, limit=limit)
    return JSONResponse(
        {
            "data": [
                {
                    "host": d.host,
                    "state": d.state,
                    "consecutiveFailures": d.consecutive_failures,
                    "lastError": d.last_error,
                    "lastFailureAt": iso(d.last_failure_at),
                    "openedAt": iso(d.opened_at),
                    "nextProbeAt": iso(d.probe_at),
                    "heldDeliveries": d.held,
                }
                for d in rows
            ]
        }
    )


routes = [Route("/v1/admin/destinations", index, methods=["GET"])]
