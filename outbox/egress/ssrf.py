"""SSRF guard for callback URLs: URL syntax, an address policy, and checking resolvers.

Addresses are matched against an explicit list (``ipaddress``'s ``is_private`` flags
miss several ranges), after unwrapping any IPv4 address embedded in an IPv6 one by
the rules of ``hookrelay.outbox.destinations``.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
import idna
from aiohappyeyeballs import AddrInfoType
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.client_exceptions import cert_errors, ssl_errors
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ClientRequest
from aiohttp.helpers import ceil_timeout

from hookrelay.outbox.destinations import DEFAULT_PORTS, classify, embedded_ipv4
from hookrelay.outbox.egress.dns import AiohttpResolver, Resolver
from hookrelay.outbox.egress.proxy import EgressProxy, TunnelRefused, open_tunnel
from hookrelay.outbox.errors import (
    BlockedDestination,
    ConfigurationError,
    InvalidCallbackUrl,
    LocalFault,
    PlainHttpRefused,
)

if TYPE_CHECKING:
    from aiohttp.tracing import Trace

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# The blocked ranges, each with what it is: refusals name the rule that refused.
RANGE_KINDS: dict[IPNetwork, str] = {
    ipaddress.ip_network("0.0.0.0/8"): "this-network",
    ipaddress.ip_network("10.0.0.0/8"): "private",
    ipaddress.ip_network("100.64.0.0/10"): "shared (carrier-grade NAT)",
    ipaddress.ip_network("127.0.0.0/8"): "loopback",
    ipaddress.ip_network("169.254.0.0/16"): "link-local",
    ipaddress.ip_network("172.16.0.0/12"): "private",
    ipaddress.ip_network("192.0.0.0/24"): "IETF protocol assignment",
    ipaddress.ip_network("192.0.2.0/24"): "documentation",
    ipaddress.ip_network("192.88.99.0/24"): "6to4 relay anycast",
    ipaddress.ip_network("192.168.0.0/16"): "private",
    ipaddress.ip_network("198.18.0.0/15"): "benchmarking",
    ipaddress.ip_network("198.51.100.0/24"): "documentation",
    ipaddress.ip_network("203.0.113.0/24"): "documentation",
    ipaddress.ip_network("224.0.0.0/4"): "multicast",
    ipaddress.ip_network("240.0.0.0/4"): "reserved",
    ipaddress.ip_network("::/128"): "unspecified",
    ipaddress.ip_network("::1/128"): "loopback",
    ipaddress.ip_network("fe80::/10"): "link-local",
    ipaddress.ip_network("fc00::/7"): "unique local (private)",
    ipaddress.ip_network("fec0::/10"): "site-local",
    ipaddress.ip_network("ff00::/8"): "multicast",
    ipaddress.ip_network("2001:db8::/32"): "documentation",
}
BLOCKED_NETWORKS: tuple[IPNetwork, ...] = tuple(RANGE_KINDS)

# Cloud instance metadata services (AWS, GCP, Azure, Oracle, DigitalOcean; AWS over
# IPv6 and its container credentials; Alibaba): a refusal never suggests exempting
# one of these, whatever the range it sits in.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200")
)

MAX_URL_LENGTH = 2048
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")


def _single(addr: IPAddress) -> str | None:
    """The narrowest CIDR that would let ``addr`` through; None for a metadata address."""
    return None if addr in METADATA_ADDRESSES else f"{addr}/{addr.max_prefixlen}"


def _range(net: IPNetwork) -> str:
    return f"blocked range {net} ({RANGE_KINDS[net]})"


def _blocked_network(addr: IPAddress) -> IPNetwork | None:
    return next((net for net in BLOCKED_NETWORKS if addr in net), None)


@dataclass(frozen=True)
class ParsedTarget:
    """A callback URL that passed ``check_url``."""

    scheme: str
    host: str  # ASCII, lowercase, no brackets
    port: int
    url: str


@dataclass(frozen=True)
class AddressPolicy:
    """Which destinations callbacks may reach."""

    allowed: tuple[IPNetwork, ...] = ()
    allow_http: bool = False
    # Hashed once: the policy keys the URL-check caches of every submit and every
    # attempt, and hashing its networks each time showed in profiles.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.allowed, self.allow_http)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def from_settings(cls, allow_private_cidrs: str, allow_http: bool) -> AddressPolicy:
        """Build from ``HOOKRELAY_ALLOW_PRIVATE_CIDRS`` (comma-separated) and the http flag."""
        networks: list[IPNetwork] = []
        for entry in (e.strip() for e in allow_private_cidrs.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry))
            except ValueError as exc:
                raise ConfigurationError(
                    f"HOOKRELAY_ALLOW_PRIVATE_CIDRS: {entry!r} is not a valid CIDR ({exc})"
                ) from exc
        return cls(tuple(networks), allow_http)

    def _is_allowed(self, addr: IPAddress) -> bool:
        return any(addr in net for net in self.allowed)

    def ip_block_reason(self, ip: IPAddress | str) -> str | None:
        """None if ``ip`` may be reached, else why not."""
        blocked = self.ip_block(ip)
        return None if blocked is None else blocked.reason

    def ip_block(self, ip: IPAddress | str) -> BlockedDestination | None:
        """None if ``ip`` may be reached, else the error saying why and what would allow it."""
        try:
            addr = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
        except ValueError:
            return BlockedDestination(f"{ip!r} is not an IP address")  # fail closed
        if self._is_allowed(addr):
            return None
        net = _blocked_network(addr)
        if net is not None:
            return BlockedDestination(f"address {addr} is in {_range(net)}", _single(addr))
        if not isinstance(addr, ipaddress.IPv6Address):
            return None
        prefix = classify(addr)
        if prefix is None:
            return None
        if prefix.rule == "refuse":
            return BlockedDestination(
                f"address {addr} is in {prefix.network} ({prefix.name}), never a callback",
                _single(addr),
            )
        for inner in embedded_ipv4(addr, prefix):
            net = _blocked_network(inner)
            if net is not None and not self._is_allowed(inner):
                return BlockedDestination(
                    f"address {addr} embeds {inner}, which is in {_range(net)}", _single(inner)
                )
        return None

    def check_url(self, url: str) -> ParsedTarget:
        """Check a callback URL's syntax, and its address if the host is an IP literal.

        Raises :class:`InvalidCallbackUrl` for a malformed URL, ``BlockedDestination`` for a blocked
        literal. Host names are not resolved here; see ``guard_target``.
        """
        if len(url) > MAX_URL_LENGTH:
            raise InvalidCallbackUrl(f"URL is longer than {MAX_URL_LENGTH} characters")
        if any(c == "\\" or c.isspace() or not c.isprintable() for c in url):
            raise InvalidCallbackUrl("URL contains whitespace, control characters or backslashes")
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise InvalidCallbackUrl(f"malformed URL: {exc}") from None
        if parts.scheme not in DEFAULT_PORTS:
            raise InvalidCallbackUrl("URL must be an absolute http:// or https:// URL")
        if parts.scheme == "http" and not self.allow_http:
            raise PlainHttpRefused("plain http URLs are not allowed; use https")
        if "#" in url:
            raise InvalidCallbackUrl("URL must not contain a fragment")
        if "@" in parts.netloc:
            raise InvalidCallbackUrl("URL must not contain credentials")
        host, bracketed, port_text = _split_netloc(parts.netloc)
        port = DEFAULT_PORTS[parts.scheme]
        if port_text:
            if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
                raise InvalidCallbackUrl(
                    f"port must be a number from 1 to 65535, not {port_text!r}"
                )
            port = int(port_text)
        host, literal = _normalize_host(host, bracketed)
        if literal is not None:
            blocked = self.ip_block(literal)
            if blocked is not None:
                raise blocked
            if host != str(literal):
                raise InvalidCallbackUrl(
                    f"host {host!r} is a non-canonical IPv4 address ({literal})"
                )
        return ParsedTarget(parts.scheme, host, port, url)


def _split_netloc(netloc: str) -> tuple[str, bool, str]:
    """(host, bracketed, port text); urlsplit itself accepts junk such as ``[::1]x``."""
    if netloc.startswith("["):
        end = netloc.find("]")
        host, rest, bracketed = netloc[1:end], netloc[end + 1 :], True
    else:
        host, sep, port = netloc.partition(":")
        rest, bracketed = sep + port, False
    if not host:
        raise InvalidCallbackUrl("URL must include a host")
    if rest and not rest.startswith(":"):
        raise InvalidCallbackUrl(f"malformed host and port {netloc!r}")
    return host, bracketed, rest[1:]


def _normalize_host(host: str, bracketed: bool) -> tuple[str, IPAddress | None]:
    """(ASCII host, the address if it is an IP literal)."""
    if bracketed:
        try:
            addr = ipaddress.IPv6Address(host)
        except ValueError:
            raise InvalidCallbackUrl(f"invalid IPv6 literal [{host}]") from None
        if addr.scope_id:  # a zone id names an interface of ours
            raise InvalidCallbackUrl(f"IPv6 zone ids are not allowed: [{host}]")
        return addr.compressed, addr
    try:
        host = host.lower() if host.isascii() else idna.encode(host, uts46=True).decode()
    except UnicodeError as exc:  # idna.IDNAError included
        raise InvalidCallbackUrl(f"invalid international host name {host!r}: {exc}") from None
    try:
        return host, ipaddress.IPv4Address(host)
    except ValueError:
        pass
    name = host.removesuffix(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise InvalidCallbackUrl(f"invalid host name {host!r}")
    # The C resolver reads '127.1', '0x7f000001' or '2130706433' as addresses.
    try:
        return host, ipaddress.IPv4Address(socket.inet_aton(name))
    except OSError:
        return host, None


def _refuse_blocked(host: str, addresses: Iterable[str], policy: AddressPolicy) -> None:
    for address in addresses:
        blocked = policy.ip_block(address)
        if blocked is not None:
            if host != address:
                raise BlockedDestination(f"{host}: {blocked.reason}", blocked.allow)
            raise blocked


async def resolve_checked(
    host: str, port: int, policy: AddressPolicy, resolver: Resolver
) -> list[str]:
    """Resolve ``host``; refuse it if any of its addresses is blocked.

    ``LookupFailed`` (no such name, or no answer within the resolver's deadline)
    and ``LocalFault`` (our resolver cannot work) propagate.
    """
    host = host.removeprefix("[").removesuffix("]")
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        try:  # '127.1', '0x7f000001': what the C library reads as an address
            addresses = [str(ipaddress.IPv4Address(socket.inet_aton(host)))]
        except OSError:
            addresses = [r.address for r in await resolver.resolve(host)]
    _refuse_blocked(host, addresses, policy)
    return addresses


async def guard_target(url: str, policy: AddressPolicy, resolver: Resolver) -> ParsedTarget:
    """The full submit-time check: ``check_url``, then ``resolve_checked`` for names.

    The resolver caches answers for their TTL, so a busy API looks a name up
    once per TTL; the answer is only advisory here anyway, since every
    connection is checked again.
    """
    target, literal = _checked(policy, url)
    if not literal:  # a name (check_url has judged a literal's address itself)
        await resolve_checked(target.host, target.port, policy, resolver)
    return target


@functools.lru_cache(maxsize=4096)
def _checked(policy: AddressPolicy, url: str) -> tuple[ParsedTarget, bool]:
    # A pure function of the two, and partners send the same few URLs again and
    # again: parsed once, not per submit. A refusal raises, and is not cached.
    target = policy.check_url(url)
    try:
        ipaddress.ip_address(target.host)
    except ValueError:
        return target, False
    return target, True


class GuardedResolver(AbstractResolver):
    """aiohttp resolver that refuses a host if any address it resolves to is blocked.

    aiohttp connects to exactly the addresses returned here, so there is no second
    lookup to rebind. It never calls a resolver for IP-literal hosts, though: use
    ``GuardedConnector``, which also checks those.
    """

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self._inner = inner if inner is not None else AiohttpResolver(Resolver())

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        _refuse_blocked(host, (r["host"] for r in results), self.policy)
        return results

    async def close(self) -> None:
        await self._inner.close()


class GuardedConnector(aiohttp.TCPConnector):
    """``TCPConnector`` with a ``GuardedResolver`` that also checks IP-literal hosts.

    With ``proxy``, each connection is a CONNECT tunnel through it to the checked
    address aiohttp would have dialled (``egress.proxy``); the rest (TLS with the
    callback's host name, the pool, the request) is as on a direct connection.
    """

    def __init__(
        self,
        policy: AddressPolicy,
        *,
        resolver: AbstractResolver | None = None,
        proxy: EgressProxy | None = None,
        proxy_resolver: Resolver | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(resolver=GuardedResolver(policy, resolver), **kwargs)
        self._ssrf_policy = policy
        self._egress_proxy = proxy
        self._proxy_resolver = proxy_resolver if proxy_resolver is not None else Resolver()

    async def _wrap_create_connection(
        self,
        *args: Any,
        addr_infos: list[AddrInfoType],
        req: ClientRequest,
        timeout: aiohttp.ClientTimeout,
        client_error: type[Exception] = aiohttp.ClientConnectorError,
        **kwargs: Any,
    ) -> tuple[asyncio.Transport, ResponseHandler]:
        proxy = self._egress_proxy
        if proxy is None:
            return await super()._wrap_create_connection(
                *args,
                addr_infos=addr_infos,
                req=req,
                timeout=timeout,
                client_error=client_error,
                **kwargs,
            )
        # aiohttp dials the first address of each family at once (happy eyeballs) and,
        # when that fails, drops the first of each family and calls again. A tunnel
        # goes to one address at a time, so the addresses are tried here, in the
        # resolver's order, the next one only after a gateway error or a timeout (the
        # proxy could not reach that address); on any failure the list is emptied so
        # that aiohttp does not call again with what it would have left.
        targets = [(info[4][0], info[4][1]) for info in addr_infos]
        refused: list[str] = []
        try:
            for index, target in enumerate(targets):
                last = index == len(targets) - 1
                try:
                    return await self._tunnelled(
                        proxy, target, req, timeout, client_error, args, kwargs
                    )
                except TunnelRefused as exc:
                    refused.append(exc.strerror or str(exc))
                    if last:
                        joined = TunnelRefused(exc.errno, "; ".join(refused))
                        raise client_error(req.connection_key, joined) from exc
                except TimeoutError:
                    refused.append(f"egress proxy: no answer from {target[0]} in time")
                    if last:
                        raise
        except BaseException:
            addr_infos.clear()
            raise
        raise AssertionError("aiohttp asks for a connection with no address")

    async def _tunnelled(
        self,
        proxy: EgressProxy,
        target: tuple[str, int],
        req: ClientRequest,
        timeout: aiohttp.ClientTimeout,
        client_error: type[Exception],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[asyncio.Transport, ResponseHandler]:
        """A connection through ``proxy`` to one checked address, TLS included.

        Raises :class:`TunnelRefused` for a gateway error and ``TimeoutError`` when
        the proxy is up but the address did not answer in time (both the
        destination's, so the caller may try the next address), :class:`LocalFault`
        when the proxy is the one at fault, aiohttp's errors for the rest.
        """
        reached: list[bool] = []
        try:
            async with ceil_timeout(timeout.sock_connect, ceil_threshold=timeout.ceil_threshold):
                sock = await open_tunnel(self._loop, proxy, self._proxy_resolver, target, reached)
                if kwargs.get("ssl") and self._ssl_shutdown_timeout:  # as aiohttp's own
                    kwargs = {**kwargs, "ssl_shutdown_timeout": self._ssl_shutdown_timeout}
                try:
                    return await self._loop.create_connection(*args, **kwargs, sock=sock)
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError as exc:
            if not reached:
                raise LocalFault(
                    "egress_proxy",
                    f"egress proxy {proxy}: no connection within the connect timeout",
                ) from exc
            raise  # the proxy is up; the checked address did not answer in time
        except cert_errors as exc:
            raise aiohttp.ClientConnectorCertificateError(req.connection_key, exc) from exc
        except ssl_errors as exc:
            raise aiohttp.ClientConnectorSSLError(req.connection_key, exc) from exc
        except TunnelRefused:
            raise
        except OSError as exc:
            raise client_error(req.connection_key, exc) from exc

    # aiohttp answers IP literals inside _resolve_host without asking the resolver, and
    # serves names from its DNS cache; checking here covers every address it dials.
    async def _resolve_host(
        self, host: str, port: int, traces: Sequence[Trace] | None = None
    ) -> list[ResolveResult]:
        results = await super()._resolve_host(host, port, traces=traces)
        _refuse_blocked(host, (r["host"] for r in results), self._ssrf_policy)
        return results


def blocked_reason(exc: BaseException) -> str | None:
    """The reason of the first ``BlockedDestination`` in ``exc``'s cause/context chain."""
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, BlockedDestination):
            return current.reason
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None
