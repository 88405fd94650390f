"""``/v1/test-events``: a signed ping to an endpoint of the tenant's, before any real task."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookrelay.outbox.tasks import get_test_event, send_test_event
from hookrelay.service.api import shapes
from hookrelay.service.api.auth import require_tenant
from hookrelay.service.api.bodies import answer, read_body
from hookrelay.service.api.callback_url import check_callback_url


async def create(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    body = await read_body(request, shapes.PingBody)
    # The same checks as a task's callbackUrl: scheme, syntax, every resolved address.
    url = await check_callback_url(
        body.callback_url, request.app.state.address_policy, request.app.state.submit_resolver
    )
    async with request.app.state.pool.acquire() as conn:
        event_id = await send_test_event(conn, tenant_id, url)
    return answer(
        shapes.TestEvent(event_id=event_id, type="ping", status="pending"),
        202,
        {"Location": f"/v1/test-events/{event_id}"},
    )


async def show(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    async with request.app.state.pool.acquire() as conn:
        event = await get_test_event(conn, tenant_id, request.path_params["event_id"])
    return answer(
        shapes.TestEvent(
            event_id=event.event_id,
            type="ping",
            status=event.status,
            attempts=[a.resource() for a in event.attempts],
        )
    )


routes = [
    Route("/v1/test-events", create, methods=["POST"]),
    Route("/v1/test-events/{event_id}", show, methods=["GET"]),
]
