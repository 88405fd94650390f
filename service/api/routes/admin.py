"""Ops routes under ``/v1/admin``: tenants and their signing secrets."""

from __future__ import annotations

from typing import Any, get_args

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hookrelay.outbox.keys import rotate_secret
from hookrelay.outbox.models import SignatureScheme, iso
from hookrelay.outbox.tasks import Cursor
from hookrelay.outbox.tenants import create_tenant, list_tenants, rotate_api_key
from hookrelay.service.api import validation
from hookrelay.service.api.auth import require_admin
from hookrelay.service.api.bodies import read_json
from hookrelay.service.api.errors import Unprocessable

MAX_NAME = 200


TENANT_FIELDS = {"name", "signatureScheme"}
SCHEMES: tuple[SignatureScheme, ...] = get_args(SignatureScheme)


def _scheme(raw: Any) -> SignatureScheme:
    for scheme in SCHEMES:
        if raw == scheme:
            return scheme
    raise Unprocessable(f"signatureScheme must be one of: {', '.join(SCHEMES)}")


async def new_tenant(request: Request) -> Response:
    await require_admin(request)
    body = await read_json(request)
    name = body.get("name") if isinstance(body, dict) else None
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise Unprocessable(f"name is required: a string of 1-{MAX_NAME} characters")
    if set(body) - TENANT_FIELDS:
        raise Unprocessable(f"unknown field(s): {', '.join(sorted(set(body) - TENANT_FIELDS))}")
    scheme = _scheme(body.get("signatureScheme", "v1"))
    async with request.app.state.pool.acquire() as conn:
        tenant = await create_tenant(conn, name.strip(), request.app.state.secret_box, scheme)
    return JSONResponse(
        tenant.to_resource(), status_code=201, headers={"Cache-Control": "no-store"}
    )


async def rotate(request: Request) -> Response:
    await require_admin(request)
    await read_json(request, required=False)
    overlap = request.app.state.settings.secret_overlap_s
    async with request.app.state.pool.acquire() as conn:
        keys = await rotate_secret(
            conn, request.path_params["tenant_id"], request.app.state.secret_box, overlap
        )
    return JSONResponse(
        {
            "id": request.path_params["tenant_id"],
            "signingSecret": keys.signing_secret,
            "publicKey": keys.public_key,
            "previousSecretsExpireInSeconds": overlap,
        },
        headers={"Cache-Control": "no-store"},
    )


async def index(request: Request) -> Response:
    await require_admin(request)
    q = request.query_params
    cursor = validation.decode_cursor(q.get("cursor"))
    async with request.app.state.pool.acquire() as conn:
        rows, nxt = await list_tenants(
            conn,
            after=(cursor.updated_at, cursor.id) if cursor else None,
            limit=validation.limit(q.get("limit")),
        )
    return JSONResponse(
        {
            "data": [
                {
                    "id": t.id,
                    "name": t.name,
                    "createdAt": iso(t.created_at),
                    "secretCount": t.secrets,
                }
                for t in rows
            ],
            "nextCursor": validation.encode_cursor(Cursor(*nxt) if nxt else None),
        }
    )


async def rotate_key(request: Request) -> Response:
    await require_admin(request)
    await read_json(request, required=False)
    tenant_id = request.path_params["tenant_id"]
    async with request.app.state.pool.acquire() as conn:
        api_key = await rotate_api_key(conn, tenant_id)
    # This process forgets the old key now; the others on the NOTIFY.
    request.app.state.key_cache.evict_tenant(tenant_id)
    return JSONResponse({"id": tenant_id, "apiKey": api_key}, headers={"Cache-Control": "no-store"})


routes = [
    Route("/v1/admin/tenants", index, methods=["GET"]),
    Route("/v1/admin/tenants", new_tenant, methods=["POST"]),
    Route("/v1/admin/tenants/{tenant_id}/rotate-key", rotate_key, methods=["POST"]),
    Route("/v1/admin/tenants/{tenant_id}/rotate-secret", rotate, methods=["POST"]),
]
