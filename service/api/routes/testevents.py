"""``/v1/test-events``: a signed ping to an endpoint of the tenant's, before any real task."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hookrelay.outbox.tasks import PING, get_test_event, send_test_event
from hookrelay.service.api import validation
from hookrelay.service.api.auth import require_tenant
from hookrelay.service.api.bodies import read_json


async def create(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    body = await read_json(request)
    # The same checks as a task's callbackUrl: scheme, syntax, every resolved address.
    url = await validation.ping_target(
        body, request.app.state.address_policy, request.app.state.submit_resolver
    )
    async with request.app.state.pool.acquire() as conn:
        event_id = await send_test_event(conn, tenant_id, url)
    return JSONResponse(
        {"eventId": event_id, "type": PING, "status": "pending"},
        status_code=202,
        headers={"Location": f"/v1/test-events/{event_id}"},
    )


async def show(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    async with request.app.state.pool.acquire() as conn:
        event = await get_test_event(conn, tenant_id, request.path_params["event_id"])
    return JSONResponse(event.to_resource())


routes = [
    Route("/v1/test-events", create, methods=["POST"]),
    Route("/v1/test-events/{event_id}", show, methods=["GET"]),
]
