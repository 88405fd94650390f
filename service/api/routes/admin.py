"""Ops routes under ``/v1/admin``: tenants and their signing secrets."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookrelay.outbox.keys import rotate_secret
from hookrelay.outbox.tasks import Cursor
from hookrelay.outbox.tenants import create_tenant, list_tenants, rotate_api_key
from hookrelay.service.api import shapes, validation
from hookrelay.service.api.auth import require_admin
from hookrelay.service.api.bodies import answer, read_body, read_query

NO_STORE = {"Cache-Control": "no-store"}


async def new_tenant(request: Request) -> Response:
    await require_admin(request)
    body = await read_body(request, shapes.TenantBody)
    name = shapes.strip_blank(body.name)
    async with request.app.state.pool.acquire() as conn:
        t = await create_tenant(conn, name, request.app.state.secret_box, body.signature_scheme)
    return answer(shapes.TenantCreated.of(t), 201, NO_STORE)


async def rotate(request: Request) -> Response:
    await require_admin(request)
    await read_body(request, shapes.NoBody, required=False)
    overlap = request.app.state.settings.secret_overlap_s
    async with request.app.state.pool.acquire() as conn:
        keys = await rotate_secret(
            conn, request.path_params["tenant_id"], request.app.state.secret_box, overlap
        )
    rotated = shapes.SecretRotated(
        id=request.path_params["tenant_id"],
        signing_secret=keys.signing_secret,
        public_key=keys.public_key,
        previous_secrets_expire_in_seconds=overlap,
    )
    return answer(rotated, headers=NO_STORE)


async def index(request: Request) -> Response:
    await require_admin(request)
    q = read_query(request, shapes.Paging)
    cursor = validation.decode_cursor(q.cursor)
    async with request.app.state.pool.acquire() as conn:
        rows, nxt = await list_tenants(
            conn, after=(cursor.updated_at, cursor.id) if cursor else None, limit=q.limit
        )
    page = shapes.TenantPage(
        data=[
            shapes.TenantSummary(
                id=t.id, name=t.name, created_at=t.created_at, secret_count=t.secrets
            )
            for t in rows
        ],
        next_cursor=validation.encode_cursor(Cursor(*nxt) if nxt else None),
    )
    return answer(page)


async def rotate_key(request: Request) -> Response:
    await require_admin(request)
    await read_body(request, shapes.NoBody, required=False)
    tenant_id = request.path_params["tenant_id"]
    async with request.app.state.pool.acquire() as conn:
        api_key = await rotate_api_key(conn, tenant_id)
    # This process forgets the old key now; the others on the NOTIFY.
    request.app.state.key_cache.evict_tenant(tenant_id)
    return answer(shapes.KeyRotated(id=tenant_id, api_key=api_key), headers=NO_STORE)


routes = [
    Route("/v1/admin/tenants", index, methods=["GET"]),
    Route("/v1/admin/tenants", new_tenant, methods=["POST"]),
    Route("/v1/admin/tenants/{tenant_id}/rotate-key", rotate_key, methods=["POST"]),
    Route("/v1/admin/tenants/{tenant_id}/rotate-secret", rotate, methods=["POST"]),
]
