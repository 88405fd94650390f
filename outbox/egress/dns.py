"""Asynchronous DNS: c-ares (through aiodns), a deadline per lookup, a cache that honours TTLs.

No lookup takes a thread: the resolver stdlib ``getaddrinfo`` uses shares a small
pool, so names whose DNS never answers used to hold every other lookup of the
process behind them. Here each lookup runs on c-ares' own sockets under its
``timeout_s``; one that runs out fails alone (``LookupFailed``), and lookups of
other names go on meanwhile. The API and the dispatcher each have their own
``Resolver``, so each has its own budget. Concurrent lookups of one name share
one query; answers are cached for their TTL (capped at ``max_ttl_s``); failures
are not cached.

Errors: ``LookupFailed`` when the name cannot be resolved (no such name, no
answer in time: the destination's problem), ``LocalFault`` when our own resolver
cannot work (unreachable nameserver, out of file descriptors or memory).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiodns
import pycares
from aiohttp.abc import AbstractResolver, ResolveResult
from pycares import errno as ares

from hookrelay.outbox.errors import LocalFault, LocalFaultKind, LookupFailed

__all__ = ["DNS_SUBMIT_TIMEOUT_S", "DNS_TIMEOUT_S", "AiohttpResolver", "Resolved", "Resolver"]

# Default deadlines of one lookup (HOOKRELAY_DNS_SUBMIT_TIMEOUT_S, _DNS_TIMEOUT_S).
# A submit has a caller waiting on it; a delivery attempt has its own 15 s budget.
DNS_SUBMIT_TIMEOUT_S = 2.0
DNS_TIMEOUT_S = 5.0

# c-ares failures that say nothing about the name: our resolver cannot work.
_LOCAL_CODES: dict[int, LocalFaultKind] = {
    ares.ARES_ECONNREFUSED: "resolver_unavailable",
    ares.ARES_EDESTRUCTION: "resolver_unavailable",
    ares.ARES_ENOTINITIALIZED: "resolver_unavailable",
    ares.ARES_ECANCELLED: "resolver_unavailable",
    ares.ARES_EADDRGETNETWORKPARAMS: "resolver_unavailable",
    ares.ARES_ELOADIPHLPAPI: "resolver_unavailable",
    ares.ARES_EFILE: "out_of_fds",
    ares.ARES_ENOMEM: "out_of_memory",
}


@dataclass(frozen=True, slots=True)
class Resolved:
    """One address of a name, as a socket wants it."""

    family: socket.AddressFamily
    address: str


class Resolver:
    """Names to addresses, each lookup bounded by ``timeout_s``; open on first use."""

    def __init__(
        self,
        *,
        timeout_s: float = DNS_TIMEOUT_S,
        nameservers: Sequence[str] = (),
        max_ttl_s: float = 300.0,
        max_entries: int = 4096,
    ) -> None:
        self.timeout_s = timeout_s
        self._nameservers = list(nameservers)
        self._max_ttl_s = max_ttl_s
        self._max_entries = max_entries
        self._cache: dict[str, tuple[float, list[Resolved]]] = {}
        self._pending: dict[str, asyncio.Task[list[Resolved]]] = {}
        self._channel: aiodns.DNSResolver | None = None

    def _open(self) -> aiodns.DNSResolver:
        if self._channel is None:
            # Two tries within the deadline, so one lost datagram is not a failure;
            # asyncio.timeout below stays the hard bound.
            self._channel = aiodns.DNSResolver(
                self._nameservers or None, timeout=self.timeout_s / 3, tries=2
            )
        return self._channel

    async def resolve(self, host: str) -> list[Resolved]:
        """Every address of ``host``; raises ``LookupFailed`` or ``LocalFault``."""
        hit = self._cache.get(host)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        task = self._pending.get(host)
        if task is None:
            task = asyncio.create_task(self._lookup(host), name=f"dns {host}")
            self._pending[host] = task
            task.add_done_callback(lambda _: self._pending.pop(host, None))
        # Shielded: one caller giving up must not cancel the others' lookup.
        return await asyncio.shield(task)

    async def _lookup(self, host: str) -> list[Resolved]:
        try:
            async with asyncio.timeout(self.timeout_s):
                answer = await self._open().getaddrinfo(
                    host, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM
                )
        except TimeoutError:
            raise LookupFailed(host, f"no DNS answer within {self.timeout_s:g}s") from None
        except aiodns.error.DNSError as exc:
            code = exc.args[0] if exc.args else None
            text = exc.args[1] if len(exc.args) > 1 else str(exc)
            if code in _LOCAL_CODES:
                raise LocalFault(_LOCAL_CODES[code], f"DNS lookup of {host}: {text}") from exc
            if code == ares.ARES_ETIMEOUT:
                text = f"no DNS answer within {self.timeout_s:g}s"
            raise LookupFailed(host, text) from exc
        return self._store(host, answer)

    def _store(self, host: str, answer: pycares.AddrInfoResult) -> list[Resolved]:
        found: dict[str, Resolved] = {}
        ttl = self._max_ttl_s
        for node in answer.nodes:
            raw = node.addr[0]
            address = raw.decode() if isinstance(raw, bytes) else str(raw)
            found.setdefault(address, Resolved(socket.AddressFamily(node.family), address))
            ttl = min(ttl, float(node.ttl))
        addresses = list(found.values())
        if not addresses:
            raise LookupFailed(host, "the name has no addresses")
        if ttl > 0:
            if len(self._cache) >= self._max_entries:
                self._cache.clear()
            self._cache[host] = (time.monotonic() + ttl, addresses)
        return addresses

    async def close(self) -> None:
        """Cancel lookups in progress and close the channel."""
        for task in list(self._pending.values()):
            task.cancel()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


class AiohttpResolver(AbstractResolver):
    """A :class:`Resolver` as aiohttp's connector asks for one."""

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self.resolver.resolve(host)
        if family != socket.AF_UNSPEC:
            found = [r for r in found if r.family == family]
            if not found:
                raise LookupFailed(host, f"no {family.name} address")
        return [
            ResolveResult(
                hostname=host,
                host=r.address,
                port=port,
                family=r.family,
                proto=0,
                flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
            )
            for r in found
        ]

    async def close(self) -> None:
        await self.resolver.close()
