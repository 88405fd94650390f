"""``GET /v1/signing-keys``: what a tenant's receivers verify webhooks with."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hookrelay.outbox.keys import SigningKeyRow, list_signing_keys
from hookrelay.outbox.models import iso
from hookrelay.service.api.auth import require_tenant


def _key(row: SigningKeyRow) -> dict[str, object]:
    # HMAC secrets are shown once, at creation or rotation; here only that one
    # signs and until when. Ed25519 public keys are public: always shown.
    out: dict[str, object] = {"scheme": row.scheme}
    if row.public_key is not None:
        out["publicKey"] = row.public_key
    out["createdAt"] = iso(row.created_at)
    out["expiresAt"] = iso(row.expires_at)
    return out


async def index(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    async with request.app.state.pool.acquire() as conn:
        scheme, keys = await list_signing_keys(conn, tenant_id)
    return JSONResponse({"signatureScheme": scheme, "data": [_key(k) for k in keys]})


routes = [Route("/v1/signing-keys", index, methods=["GET"])]
