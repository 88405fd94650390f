"""Liveness and readiness (the API's, and ``hookrelay dispatch``'s own port's)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hookrelay.outbox.store.metrics import ping
from hookrelay.service.api.release import release

READY_TIMEOUT_S = 2.0

# What a process checks of its own before the database (``app.state.readiness``):
# why it is not ready, or None. ``hookrelay dispatch`` checks its claim loop.
Readiness = Callable[[], str | None]


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok", "version": release()})


def _unavailable(message: str) -> Response:
    return JSONResponse(
        {"status": "unavailable", "error": {"code": "unavailable", "message": message[:200]}},
        status_code=503,
    )


async def readyz(request: Request) -> Response:
    own: Readiness | None = getattr(request.app.state, "readiness", None)
    problem = None if own is None else own()
    if problem is not None:
        return _unavailable(problem)
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            async with request.app.state.pool.acquire() as conn:
                writable = await ping(conn)
    except Exception as exc:  # any failure means "not ready", never a 500
        return _unavailable(str(exc))
    if not writable:
        # A standby (DATABASE_URL without target_session_attrs=read-write, or mid
        # failover) answers reads only: every write would fail, so not ready.
        return _unavailable("the database is read-only (a standby?); writes would fail")
    return JSONResponse({"status": "ok"})


routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
]
