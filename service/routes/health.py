"""Liveness and readiness."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from outbox.store.metrics import ping

READY_TIMEOUT_S = 2.0


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            async with request.app.state.pool.acquire() as conn:
                await ping(conn)
    except Exception as exc:  # any failure means "not ready", never a 500
        return JSONResponse(
            {"status": "unavailable", "error": {"code": "unavailable", "message": str(exc)[:200]}},
            status_code=503,
        )
    return JSONResponse({"status": "ok"})


routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
]
