"""A portal session: opened by a portal link, held in a signed cookie, checked at
every request against the tenant's API key.

The cookie is Starlette's signed ``SessionMiddleware`` cookie (HttpOnly,
SameSite=Strict, path ``/portal``, Secure when the page came over https), its
signing key derived from the admin token as the console's is, under another label.
It holds the tenant, whether the link was read-only, when it opened, a tag of the
tenant's API key hash (:func:`hookrelay.outbox.portal.session_tag`) and the CSRF
token. A session is over after 12 hours, when the tenant's key is rotated, or when
the tenant is gone; nothing else has to be told.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hookrelay.outbox.portal import SESSION_MAX_S, OpenedLink, session_tag, session_tenant

SESSION_COOKIE = "hookrelay_portal"


def session_secret(admin_token: str) -> str:
    return hashlib.sha256(b"hookrelay-portal-session\0" + admin_token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Partner:
    """Who the open session is for, and whether it may change anything."""

    tenant_id: str
    name: str
    read_only: bool

    @property
    def actor(self) -> str:
        """How the audit trail names what this session does."""
        return f"portal:{self.tenant_id}"


def start(request: Request, opened: OpenedLink) -> None:
    """Replace whatever session the browser had with the one this link opens."""
    request.session.clear()
    request.session.update(
        tenant=opened.tenant_id,
        ro=opened.read_only,
        at=time.time(),
        tag=session_tag(opened.api_key_hash),
        csrf=secrets.token_urlsafe(24),
    )


async def current(request: Request) -> Partner | None:
    """The partner of this request's session, or None if it has none or it is over."""
    s = request.session
    tenant, started, tag = s.get("tenant"), s.get("at"), s.get("tag")
    if not (
        isinstance(tenant, str)
        and isinstance(tag, str)
        and isinstance(started, int | float)
        and 0 <= time.time() - started < SESSION_MAX_S
    ):
        return None
    async with request.app.state.pool.acquire() as conn:
        name = await session_tenant(conn, tenant, tag)
    if name is None:
        s.clear()
        return None
    return Partner(tenant, name, bool(s.get("ro", True)))


class SecureOverHttps:
    """Marks the session cookie Secure on answers to requests that came over https
    (directly, or as the ASGI server was told by a trusted proxy)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("scheme") != "https":
            await self.app(scope, receive, send)
            return

        async def secure(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                cookies = headers.getlist("set-cookie")
                if cookies:
                    del headers["set-cookie"]
                    for cookie in cookies:
                        if cookie.startswith(SESSION_COOKIE + "=") and "; secure" not in (
                            cookie.lower()
                        ):
                            cookie += "; secure"
                        headers.append("set-cookie", cookie)
            await send(message)

        await self.app(scope, receive, secure)
