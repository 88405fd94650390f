"""Senders: the one HTTP operation a dispatcher needs, a POST with a capped reply.

Production uses :class:`AiohttpSender`, straight over aiohttp's connection pool.
Measured on a 2-core machine against a loopback receiver, httpx's own transport
peaked near 1,200 POST/s; httpx over ``httpx-aiohttp`` reached 3,000-3,300
events/s end to end, with a quarter of the dispatcher's samples in httpx's
request and header models; aiohttp alone removes that layer (BENCHMARKS.md).
:class:`HttpxSender` wraps any ``httpx.AsyncClient``, so unit tests drive the
delivery rules with respx.

Both raise :class:`~hookrelay.outbox.errors.TransportError` for a failed exchange,
:class:`~hookrelay.outbox.errors.BlockedDestination` when the SSRF guard refuses, and
:class:`~hookrelay.outbox.errors.LocalFault` when the fault is ours
(``hookrelay.outbox.egress.local_faults``).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import aiohttp

from hookrelay.outbox.egress.dns import DNS_TIMEOUT_S, AiohttpResolver, Resolver
from hookrelay.outbox.egress.local_faults import as_local_fault
from hookrelay.outbox.egress.proxy import EgressProxy
from hookrelay.outbox.egress.ssrf import AddressPolicy, GuardedConnector, blocked_reason
from hookrelay.outbox.errors import BlockedDestination, LocalFault, TransportError

if TYPE_CHECKING:  # imported by HttpxSender alone: every process that starts would pay it
    import httpx

USER_AGENT = "hookrelay/0.1 (+https://www.standardwebhooks.com)"


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: Mapping[str, str]  # case-insensitive lookups
    body: bytes  # decoded, at most the cap the caller asked for


class Sender(Protocol):
    async def post(self, url: str, body: bytes, headers: Mapping[str, str], cap: int) -> Reply: ...

    async def aclose(self) -> None: ...


def _mapped(exc: Exception) -> BlockedDestination | TransportError | LocalFault:
    reason = blocked_reason(exc)
    if reason is not None:
        return BlockedDestination(reason)
    local = as_local_fault(exc)
    if local is not None:
        return local
    return TransportError(f"{type(exc).__name__}: {exc}"[:500])


class AiohttpSender:
    """A guarded aiohttp session, opened on first use inside the running loop."""

    def __init__(
        self,
        addresses: AddressPolicy,
        *,
        concurrency: int,
        per_host: int,
        connect_timeout_s: float,
        resolver: Resolver | None = None,
        tls: ssl.SSLContext | None = None,
        proxy: EgressProxy | None = None,
    ) -> None:
        self._addresses = addresses
        self._resolver = resolver if resolver is not None else Resolver()
        self._limits = (concurrency, per_host)
        self._tls = tls
        self._proxy = proxy
        # The whole attempt runs under the caller's deadline; only connecting
        # has a shorter one of its own.
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        concurrency, per_host = self._limits
        # GuardedConnector checks every address it dials, IP literals included.
        # aiohttp's own DNS cache is off: ours honours TTLs and has a deadline.
        # The proxy's own name goes through the same resolver, unchecked: ops chose it.
        connector = GuardedConnector(
            self._addresses,
            resolver=AiohttpResolver(self._resolver),
            proxy=self._proxy,
            proxy_resolver=self._resolver,
            limit=concurrency,
            limit_per_host=per_host,
            use_dns_cache=False,
            ssl=self._tls if self._tls is not None else True,
        )
        # trust_env=False: proxies from the environment are ignored, or the
        # guard would check the proxy instead of the destination; the egress
        # proxy (HOOKRELAY_EGRESS_PROXY) is the connector's, behind the guard.
        return aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            auto_decompress=True,
            timeout=self._timeout,
            headers={"user-agent": USER_AGENT},
        )

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], cap: int) -> Reply:
        if self._session is None:
            self._session = self._open()
        session = self._session
        if session.closed:
            raise LocalFault("pool_closed", "the HTTP session is closed")
        try:
            async with session.post(
                url, data=body, headers=headers, allow_redirects=False
            ) as response:
                # content.read() yields decoded bytes: a compressed bomb stops at the cap too.
                raw = bytearray()
                while len(raw) < cap:
                    chunk = await response.content.read(cap - len(raw))
                    if not chunk:
                        break
                    raw += chunk
                return Reply(response.status, response.headers, bytes(raw))
        except (aiohttp.ClientError, OSError, RuntimeError) as exc:
            # The pool closed under this attempt: known from the session's own
            # state, never from the error's text, which may quote the receiver.
            if session.closed:
                raise LocalFault("pool_closed", "the HTTP session was closed") from exc
            if isinstance(exc, RuntimeError):
                raise  # not ours to explain: the dispatcher reports it as a bug
            raise _mapped(exc) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        await self._resolver.close()


class HttpxSender:
    """Any ``httpx.AsyncClient``; redirects are never followed."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], cap: int) -> Reply:
        import httpx

        try:
            async with self.client.stream(
                "POST", url, content=body, headers=dict(headers), follow_redirects=False
            ) as response:
                raw = bytearray()
                async for chunk in response.aiter_bytes():
                    raw += chunk
                    if len(raw) >= cap:
                        break
                return Reply(response.status_code, response.headers, bytes(raw[:cap]))
        except httpx.HTTPError as exc:
            raise _mapped(exc) from exc

    async def aclose(self) -> None:
        await self.client.aclose()


def build_sender(
    addresses: AddressPolicy,
    *,
    concurrency: int,
    per_host: int,
    connect_timeout_s: float,
    dns_timeout_s: float = DNS_TIMEOUT_S,
    nameservers: Sequence[str] = (),
    tls: ssl.SSLContext | None = None,
    proxy: EgressProxy | None = None,
) -> Sender:
    """The production sender, with its own resolver (the delivery DNS budget), the
    TLS context of ``egress.tls`` and the egress proxy, if any."""
    return AiohttpSender(
        addresses,
        concurrency=concurrency,
        per_host=per_host,
        connect_timeout_s=connect_timeout_s,
        resolver=Resolver(timeout_s=dns_timeout_s, nameservers=nameservers),
        tls=tls,
        proxy=proxy,
    )
