"""``GET /v1/signing-keys``: what a tenant's receivers verify webhooks with."""

from __future__ import annotations

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookrelay.outbox.keys import SigningKeyRow, list_signing_keys
from hookrelay.service.api import shapes
from hookrelay.service.api.auth import require_tenant
from hookrelay.service.api.bodies import answer


def _key(row: SigningKeyRow) -> shapes.SigningKey:
    # HMAC secrets are shown once, at creation or rotation; here only that one
    # signs and until when. Ed25519 public keys are public: always shown.
    return shapes.SigningKey(
        scheme=row.scheme,
        public_key=UNSET if row.public_key is None else row.public_key,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


async def index(request: Request) -> Response:
    tenant_id = await require_tenant(request)
    async with request.app.state.pool.acquire() as conn:
        scheme, keys = await list_signing_keys(conn, tenant_id)
    return answer(shapes.SigningKeys(signature_scheme=scheme, data=[_key(k) for k in keys]))


routes = [Route("/v1/signing-keys", index, methods=["GET"])]
