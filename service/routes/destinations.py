"""``GET /v1/admin/destinations``: per-host health as the circuit breaker sees it."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from outbox import queries
from outbox.models import iso

from .. import validation
from ..auth import require_admin


async def index(request: Request) -> Response:
    await require_admin(request)
    limit = validation.limit(request.query_params.get("limit"))
    async with request.app.state.pool.acquire() as conn:
        rows = await conn.fetch(queries.LIST_DESTINATIONS, limit)
    return JSONResponse({"data": [{
        "host": r["host"], "state": r["state"],
        "consecutiveFailures": r["consecutive_failures"], "lastError": r["last_error"],
        "lastFailureAt": iso(r["last_failure_at"]), "openedAt": iso(r["opened_at"]),
        "nextProbeAt": iso(r["probe_at"]), "heldDeliveries": r["held"],
    } for r in rows]})


routes = [Route("/v1/admin/destinations", index, methods=["GET"])]
