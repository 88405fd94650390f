"""``/v1/notifications``: where a tenant is told about its own delivery trouble.

``PUT`` sets the URL (checked as a callback URL is: scheme, syntax, every resolved
address) and the event types; ``GET`` shows them (404 while none is set); ``DELETE``
stops them (204, set or not, so a repeat is harmless). The notifications are queued
by the database and sent through the outbox, signed with the tenant's secret.
"""

from __future__ import annotations

from typing import cast

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookrelay.outbox import ops
from hookrelay.outbox.ops import NotificationSettings
from hookrelay.service.api import shapes
from hookrelay.service.api.auth import require_tenant
from hookrelay.service.api.bodies import answer, read_body
from hookrelay.service.api.callback_url import check_callback_url
from hookrelay.service.api.errors import NotFound, Unprocessable


def _shown(found: NotificationSettings) -> shapes.Notifications:
    return shapes.Notifications(
        url=found.url,
        events=cast("list[shapes.NotificationType]", list(found.events)),
        updated_at=found.updated_at,
    )


async def show(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    async with request.app.state.pool.acquire() as conn:
        found = await ops.get_notifications(conn, tenant_id)
    if found is None:
        raise NotFound("no notification URL is set", code="not_found")
    return answer(_shown(found))


async def put(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    body = await read_body(request, shapes.NotificationsBody)
    try:
        url = await check_callback_url(
            body.url, request.app.state.address_policy, request.app.state.submit_resolver
        )
    except Unprocessable as exc:
        # The same rules as a callbackUrl, told about the field this body has.
        message = exc.message.replace("callbackUrl", "url", 1)
        if exc.code == "blocked_callback_url":
            raise Unprocessable(message, code="blocked_notification_url") from exc
        raise Unprocessable(message, code="invalid_notification_url") from exc
    async with request.app.state.pool.acquire() as conn:
        found = await ops.set_notifications(conn, tenant_id, url, body.events)
    return answer(_shown(found))


async def delete(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    async with request.app.state.pool.acquire() as conn:
        await ops.delete_notifications(conn, tenant_id)
    return Response(status_code=204)


routes = [
    Route("/v1/notifications", show, methods=["GET"]),
    Route("/v1/notifications", put, methods=["PUT"]),
    Route("/v1/notifications", delete, methods=["DELETE"]),
]
