"""Destinations: which receiver a callback URL really names.

**The destination key**, the unit of the per-host cap and of the circuit breaker,
written on each outbox row when it is committed. A key is ``scheme://host:port``:
the scheme, the host as the resolver sees it and the effective port (80/443 when
the URL names none). Host names are IDNA-encoded, lowercased and lose a trailing
dot; IP literals take their canonical text, IPv6 in brackets. An IPv6 address that
carries an IPv4 one (IPv4-mapped, SIIT, -compatible, NAT64, 6to4, Teredo) keys as
that IPv4 address, and so do the spellings the C resolver reads as IPv4 (``127.1``,
``0x7f000001``, ``2130706433``). So every spelling of one receiver shares one cap
and one circuit::

    http://127.0.0.1:8080 == http://[::ffff:127.0.0.1]:8080 == HTTP://0x7f000001:8080/

**IPv6 prefixes that carry or hide an IPv4 destination**, each with its unwrapping
rule. One table, so a prefix cannot be known to the submit-time SSRF check and
unknown to the connect-time one, or to the destination key: all go through
:func:`embedded_ipv4`. Rules:

- ``low32``: the IPv4 address is the last 32 bits (mapped, SIIT, NAT64, compatible);
- ``rfc6052``: a local-use NAT64 prefix inside 64:ff9b:1::/48 may be any RFC 6052
  length from /48 to /96, so every layout is unwrapped and each candidate checked;
- ``6to4``: bits 16-47; ``teredo``: the server (bits 32-63) and the client
  (the last 32 bits, inverted);
- ``refuse``: no IPv4 inside and nothing a webhook may reach (discard-only, ORCHID).

Pure: no I/O, no lookups; two names that resolve to one address stay two keys. Below
the store (its host-key migration rekeys with :func:`host_key`) and the SSRF guard
(``hookrelay.outbox.egress.ssrf``), so it imports only ``hookrelay.outbox.errors``.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal
from urllib.parse import urlsplit

import idna

from hookrelay.outbox.errors import InvalidCallbackUrl

__all__ = [
    "DEFAULT_PORTS",
    "PREFIXES",
    "Prefix",
    "canonical_ip",
    "classify",
    "embedded_ipv4",
    "host_key",
]

Rule = Literal["low32", "rfc6052", "6to4", "teredo", "refuse"]
_MASK32 = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Prefix:
    network: ipaddress.IPv6Network
    rule: Rule
    name: str


def _p(cidr: str, rule: Rule, name: str) -> Prefix:
    return Prefix(ipaddress.IPv6Network(cidr), rule, name)


PREFIXES: tuple[Prefix, ...] = (
    _p("::ffff:0:0/96", "low32", "IPv4-mapped"),
    _p("::ffff:0:0:0/96", "low32", "SIIT IPv4-translated (RFC 6145)"),
    _p("64:ff9b::/96", "low32", "NAT64 well-known (RFC 6052)"),
    _p("64:ff9b:1::/48", "rfc6052", "NAT64 local-use (RFC 8215)"),
    _p("2002::/16", "6to4", "6to4 (RFC 3056)"),
    _p("2001::/32", "teredo", "Teredo (RFC 4380)"),
    _p("::/96", "low32", "IPv4-compatible (deprecated)"),
    _p("100::/64", "refuse", "discard-only (RFC 6666)"),
    _p("2001:10::/28", "refuse", "ORCHID (RFC 4843)"),
    _p("2001:20::/28", "refuse", "ORCHIDv2 (RFC 7343)"),
)


def _v4(n: int) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(n & _MASK32)


def _rfc6052(n: int) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address RFC 6052 could place in ``n`` for prefixes /48 to /96.

    Bits 64-71 (the ``u`` octet) never hold address bits, so /48 and /56 split the
    address around it.
    """
    b = n.to_bytes(16, "big")
    layouts = (b[6:8] + b[9:11], b[7:8] + b[9:12], b[9:13], b[12:16])  # /48 /56 /64 /96
    return [ipaddress.IPv4Address(raw) for raw in layouts]


def classify(addr: ipaddress.IPv6Address) -> Prefix | None:
    """The first row whose network holds ``addr`` (more specific rows come first)."""
    return next((p for p in PREFIXES if addr in p.network), None)


def embedded_ipv4(addr: ipaddress.IPv6Address, prefix: Prefix) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a packet to ``addr`` may end up at, under ``prefix``'s rule."""
    n = int(addr)
    if prefix.rule == "low32":
        return [_v4(n)]
    if prefix.rule == "rfc6052":
        return _rfc6052(n)
    if prefix.rule == "6to4":
        return [_v4(n >> 80)]
    if prefix.rule == "teredo":
        return [_v4(n >> 64), _v4(~n)]
    return []


DEFAULT_PORTS = {"http": 80, "https": 443}


def canonical_ip(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """The address a packet to ``addr`` ends up at, as canonical text.

    The prefixes and their rules are :data:`PREFIXES`, the SSRF guard's too.
    For Teredo that is the client (the host behind the relay), stored inverted
    in the low 32 bits; ``::`` and ``::1`` are not IPv4-compatible forms. A
    local-use NAT64 address, whose layout is unknown, keys as itself.
    """
    if isinstance(addr, ipaddress.IPv4Address):
        return str(addr)
    n = int(addr)
    prefix = classify(addr) if n > 1 else None
    if prefix is not None and prefix.rule in ("low32", "6to4", "teredo"):
        return str(embedded_ipv4(addr, prefix)[-1])
    return f"[{ipaddress.IPv6Address(n).compressed}]"  # drops any zone id


def _host(netloc_host: str, bracketed: bool) -> str:
    if bracketed:
        try:
            return canonical_ip(ipaddress.IPv6Address(netloc_host.split("%", 1)[0]))
        except ValueError:
            raise InvalidCallbackUrl(f"invalid IPv6 literal [{netloc_host}]") from None
    try:
        host = (
            netloc_host.lower()
            if netloc_host.isascii()
            else idna.encode(netloc_host, uts46=True).decode()
        )
    except UnicodeError as exc:  # idna.IDNAError included
        raise InvalidCallbackUrl(f"invalid international host name: {exc}") from None
    host = host.removesuffix(".")
    if not host:
        raise InvalidCallbackUrl("URL must include a host")
    if "" in host.split("."):
        raise InvalidCallbackUrl(f"host name {host!r} has an empty label")
    try:
        # Dotted quads, and what inet_aton also takes: '127.1', '0x7f.1', '2130706433'.
        return str(ipaddress.IPv4Address(socket.inet_aton(host)))
    except OSError:
        return host


def host_key(url: str) -> str:
    """The destination key of a callback URL, e.g. ``http://127.0.0.1:8080``.

    Raises :class:`InvalidCallbackUrl` for a URL without a usable scheme or host.
    """
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:
        raise InvalidCallbackUrl(f"malformed URL: {exc}") from None
    return _netloc_key(parts.scheme.lower(), parts.netloc.rpartition("@")[2])


@lru_cache(maxsize=4096)
def _netloc_key(scheme: str, netloc: str) -> str:
    """The key of a scheme and a host[:port], remembered: every submit computes its
    callback URL's key (so that its completion is one statement), most of them for a
    host seen before, and IDNA and the IP checks take 10 to 20 µs. Pure, so the cache
    changes no answer; a refusal is raised again each time (not cached)."""
    if scheme not in DEFAULT_PORTS:
        raise InvalidCallbackUrl("URL must be an absolute http:// or https:// URL")
    if netloc.startswith("["):
        end = netloc.find("]")
        if end < 0:
            raise InvalidCallbackUrl(f"invalid IPv6 literal in {netloc!r}")
        raw_host, port_text, bracketed = netloc[1:end], netloc[end + 1 :], True
    else:
        raw_host, sep, rest = netloc.partition(":")
        port_text, bracketed = sep + rest, False
    port_text = port_text.removeprefix(":")
    if port_text and not (port_text.isascii() and port_text.isdigit()):
        raise InvalidCallbackUrl(f"port must be a number, not {port_text!r}")
    port = int(port_text) if port_text else DEFAULT_PORTS[scheme]
    if not 0 < port < 65536:
        raise InvalidCallbackUrl(f"port must be a number from 1 to 65535, not {port}")
    return f"{scheme}://{_host(raw_host, bracketed)}:{port}"
