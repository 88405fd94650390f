"""Portal links: a single-use URL into the partner portal (``/portal``), asked for by
the tenant with its API key or by an operator for it; no store of it but its hash."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookrelay.outbox.portal import issue_link
from hookrelay.service.api import shapes
from hookrelay.service.api.auth import require_admin, require_tenant
from hookrelay.service.api.bodies import answer, read_body

NO_STORE = {"Cache-Control": "no-store"}
OPEN_PATH = "/portal/open"


async def _link(request: Request, tenant_id: str, created_by: str) -> Response:
    body = await read_body(request, shapes.PortalLinkBody, required=False)
    async with request.app.state.pool.acquire() as conn:
        link = await issue_link(conn, tenant_id, read_only=body.read_only, created_by=created_by)
    # The address the caller reached this API at: the link is for them to hand on.
    base = f"{request.url.scheme}://{request.url.netloc}"
    made = shapes.PortalLink(
        url=f"{base}{OPEN_PATH}?token={link.token}", expires_at=link.expires_at
    )
    return answer(made, 201, NO_STORE)


async def own(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    return await _link(request, tenant_id, f"tenant:{tenant_id}")


async def for_tenant(request: Request) -> Response:
    await require_admin(request)
    return await _link(request, request.path_params["tenant_id"], "admin")


routes = [
    Route("/v1/portal-links", own, methods=["POST"]),
    Route("/v1/admin/tenants/{tenant_id}/portal-links", for_tenant, methods=["POST"]),
]
