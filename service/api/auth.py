"""Credentials: partners present a tenant API key, executors and ops the admin token."""

from __future__ import annotations

import hmac
import time
from collections import OrderedDict
from dataclasses import dataclass

from starlette.requests import HTTPConnection, Request

from hookrelay.outbox.store import KEYS_CHANNEL, Listener
from hookrelay.outbox.tenants import authenticate, hash_api_key
from hookrelay.service.api.errors import Forbidden, Unauthorized


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: an admin, or the tenant a key belongs to."""

    tenant_id: str | None

    @property
    def is_admin(self) -> bool:
        return self.tenant_id is None


class KeyCache:
    """Recently verified API keys, by SHA-256 digest, for ``ttl_s`` seconds.

    The key lookup was a database round trip on every request, a sixth of a
    busy API's time. Only successes are kept, and only digests (what the
    database holds anyway), never the keys themselves. A rotated key must stop
    working at once, so rotation evicts its tenant here and, through
    :func:`revocations`, in every other API process.
    """

    def __init__(self, ttl_s: float = 30.0, size: int = 10_000) -> None:
        self.ttl_s, self.size = ttl_s, size
        self._entries: OrderedDict[bytes, tuple[str, float]] = OrderedDict()

    def get(self, digest: bytes) -> str | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry[1] < time.monotonic():
            del self._entries[digest]
            return None
        return entry[0]

    def put(self, digest: bytes, tenant_id: str) -> None:
        self._entries[digest] = (tenant_id, time.monotonic() + self.ttl_s)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def evict_tenant(self, tenant_id: str) -> None:
        for digest in [d for d, (t, _) in self._entries.items() if t == tenant_id]:
            del self._entries[digest]

    def clear(self) -> None:
        self._entries.clear()


def revocations(cache: KeyCache, listener: Listener) -> None:
    """Through ``listener`` (the process's LISTEN), hear of rotated API keys; after any
    outage, forget every cached key."""
    listener.join({KEYS_CHANNEL: cache.evict_tenant}, on_gap=cache.clear)


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing bearer credentials (Authorization: Bearer <key>)")
    return token.strip()


async def identify(connection: HTTPConnection, token: str) -> Caller | None:
    """The admin or the tenant ``token`` belongs to, or None if neither.

    Shared by the bearer header and the WebSocket's auth message: the admin
    token is compared in constant time, API keys by their hash.
    """
    admin_token: str = connection.app.state.admin_token
    if hmac.compare_digest(token.encode(), admin_token.encode()):
        return Caller(tenant_id=None)
    cache: KeyCache = connection.app.state.key_cache
    digest = hash_api_key(token)
    tenant_id = cache.get(digest)
    if tenant_id is None:
        async with connection.app.state.pool.acquire() as conn:
            tenant_id = await authenticate(conn, token)
        if tenant_id is None:
            return None
        cache.put(digest, tenant_id)
    return Caller(tenant_id=tenant_id)


async def caller(request: Request) -> Caller:
    """Resolve the bearer token to an admin or a tenant; 401 if it is neither."""
    who = await identify(request, _bearer(request))
    if who is None:
        raise Unauthorized("invalid credentials")
    return who


def require_metrics_reader(request: Request) -> None:
    """The admin token or ``HOOKRELAY_METRICS_TOKEN``: the series name tenants and hosts."""
    token = _bearer(request).encode()
    admin: str = request.app.state.admin_token
    metrics: str | None = request.app.state.settings.metrics_token
    # Both compared every time, in constant time, so timing tells nothing of either.
    ok = hmac.compare_digest(token, admin.encode())
    ok |= metrics is not None and hmac.compare_digest(token, metrics.encode())
    if not ok:
        raise Unauthorized("/metrics needs the admin token or the metrics token")


async def require_admin(request: Request) -> None:
    who = await caller(request)
    if not who.is_admin:
        raise Forbidden("this route needs the admin token")


async def require_tenant(request: Request) -> str:
    who = await caller(request)
    if who.tenant_id is None:
        raise Forbidden("this route needs a tenant API key")
    return who.tenant_id
