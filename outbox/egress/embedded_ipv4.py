"""IPv6 prefixes that carry or hide an IPv4 destination, each with its unwrapping rule.

One table, so a prefix cannot be known to the submit-time check and unknown to
the connect-time one: both go through :func:`embedded_ipv4`. Rules:

- ``low32``: the IPv4 address is the last 32 bits (mapped, SIIT, NAT64, compatible);
- ``rfc6052``: a local-use NAT64 prefix inside 64:ff9b:1::/48 may be any RFC 6052
  length from /48 to /96, so every layout is unwrapped and each candidate checked;
- ``6to4``: bits 16-47; ``teredo``: the server (bits 32-63) and the client
  (the last 32 bits, inverted);
- ``refuse``: no IPv4 inside and nothing a webhook may reach (discard-only, ORCHID).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal

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
