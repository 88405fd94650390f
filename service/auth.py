"""Credentials: partners present a tenant API key, executors and ops the admin token."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from starlette.requests import Request

from outbox.tenants import authenticate

from .errors import Forbidden, Unauthorized


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: an admin, or the tenant a key belongs to."""

    tenant_id: str | None

    @property
    def is_admin(self) -> bool:
        return self.tenant_id is None


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing bearer credentials (Authorization: Bearer <key>)")
    return token.strip()


async def caller(request: Request) -> Caller:
    """Resolve the bearer token to an admin or a tenant; 401 if it is neither."""
    token = _bearer(request)
    admin_token: str = request.app.state.admin_token
    if hmac.compare_digest(token.encode(), admin_token.encode()):
        return Caller(tenant_id=None)
    async with request.app.state.pool.acquire() as conn:
        tenant_id = await authenticate(conn, token)
    if tenant_id is None:
        raise Unauthorized("invalid credentials")
    return Caller(tenant_id=tenant_id)


async def require_admin(request: Request) -> None:
    who = await caller(request)
    if not who.is_admin:
        raise Forbidden("this route needs the admin token")


async def require_tenant(request: Request) -> str:
    who = await caller(request)
    if who.tenant_id is None:
        raise Forbidden("this route needs a tenant API key")
    return who.tenant_id
