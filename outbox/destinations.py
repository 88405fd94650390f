"""One key per destination: the unit of the per-host cap and of the circuit breaker.

A key is ``scheme://host:port``: the scheme, the host as the resolver sees it and
the effective port (80/443 when the URL names none). Host names are IDNA-encoded,
lowercased and lose a trailing dot; IP literals take their canonical text, IPv6
in brackets. An IPv6 address that carries an IPv4 one (IPv4-mapped, SIIT, -compatible,
NAT64, 6to4, Teredo) keys as that IPv4 address, and so do the spellings the C
resolver reads as IPv4 (``127.1``, ``0x7f000001``, ``2130706433``). So every
spelling of one receiver shares one cap and one circuit::

    http://127.0.0.1:8080 == http://[::ffff:127.0.0.1]:8080 == HTTP://0x7f000001:8080/

Pure: no I/O, no lookups; two names that resolve to one address stay two keys.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import idna

from hookrelay.outbox.egress.embedded_ipv4 import classify, embedded_ipv4
from hookrelay.outbox.errors import InvalidCallbackUrl

__all__ = ["DEFAULT_PORTS", "canonical_ip", "host_key"]

DEFAULT_PORTS = {"http": 80, "https": 443}


def canonical_ip(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """The address a packet to ``addr`` ends up at, as canonical text.

    The prefixes and their rules are the SSRF guard's table
    (``hookrelay.outbox.egress.embedded_ipv4``).
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
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise InvalidCallbackUrl("URL must be an absolute http:// or https:// URL")
    netloc = parts.netloc.rpartition("@")[2]
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
