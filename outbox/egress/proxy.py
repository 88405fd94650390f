"""The egress proxy: every delivery through one forward proxy, the SSRF rules unchanged.

With ``HOOKRELAY_EGRESS_PROXY=http://host:port`` a delivery still resolves the
callback's host and checks every address (``egress.ssrf``), then asks the proxy to
``CONNECT`` to the checked *address*, never the name: the proxy's own DNS cannot
be used to rebind it. Plain-http deliveries are tunnelled the same way. Inside the
tunnel nothing changes: the ``Host`` header, TLS SNI and certificate verification
use the callback's host name, as on a direct connection.

The proxy's own address is not checked (operators configured it). Who is at fault:

- the proxy cannot be reached, closes without answering, or refuses the CONNECT
  (403, 407, any answer but a gateway error): ours, a :class:`LocalFault` of kind
  ``egress_proxy``; the event is given back unspent and the destination's circuit
  is untouched, and delivery resumes when the proxy is back;
- the proxy answers a gateway error (500, 502, 503, 504: it could not reach the
  checked address), or never answers within the connect timeout while it tries:
  the destination's, as a refused or silent connection is without a proxy. A
  receiver that is down must still run out of attempts, not loop for ever.

A host with several checked addresses is tried at the next one, in the resolver's
order, after a gateway error or a timeout for one (``GuardedConnector`` in
``egress.ssrf``), within the same attempt: the attempt fails only when every
address did.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from hookrelay.outbox.egress.dns import Resolver
from hookrelay.outbox.egress.local_faults import as_local_fault
from hookrelay.outbox.egress.untrusted import receiver_text
from hookrelay.outbox.errors import ConfigurationError, LocalFault, LookupFailed

__all__ = ["GATEWAY_ERRORS", "EgressProxy", "TunnelRefused", "open_tunnel"]

# CONNECT answers that say the proxy could not reach the address it was given
# (tinyproxy answers 500 "Unable to connect", squid 503, others 502 or 504).
GATEWAY_ERRORS = frozenset({500, 502, 503, 504})
_MAX_ANSWER = 16_384
_REASON_CHARS = 200


@dataclass(frozen=True, slots=True)
class EgressProxy:
    """A forward proxy that accepts ``CONNECT``, as ``http://host:port``."""

    host: str  # a name or an address, without brackets
    port: int

    @classmethod
    def from_url(cls, url: str) -> EgressProxy:
        """Parse ``HOOKRELAY_EGRESS_PROXY``; :class:`ConfigurationError` names it."""

        def bad(why: str) -> ConfigurationError:
            return ConfigurationError(f"HOOKRELAY_EGRESS_PROXY={url!r}: {why}")

        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise bad(str(exc)) from None
        if parts.scheme != "http":
            raise bad("expected http://host:port (a forward proxy spoken to in plain HTTP)")
        if parts.username is not None or parts.password is not None:
            raise bad("credentials in the URL are not supported; allow this host at the proxy")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise bad("expected http://host:port, with no path")
        if not parts.hostname:
            raise bad("the URL has no host")
        if port is None:
            raise bad("the URL has no port")
        return cls(parts.hostname, port)

    def __str__(self) -> str:
        return f"http://{_authority(self.host, self.port)}"


class TunnelRefused(ConnectionError):
    """The proxy could not connect to the checked address: the destination's fault."""


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _ours(proxy: EgressProxy, what: str) -> LocalFault:
    return LocalFault("egress_proxy", f"egress proxy {proxy}: {what}")


async def _proxy_address(
    proxy: EgressProxy, resolver: Resolver
) -> tuple[socket.AddressFamily, str]:
    try:
        addr = ipaddress.ip_address(proxy.host)
    except ValueError:
        pass
    else:
        return (socket.AF_INET6 if addr.version == 6 else socket.AF_INET), str(addr)
    try:
        found = await resolver.resolve(proxy.host)
    except LookupFailed as exc:
        raise _ours(proxy, exc.reason) from exc
    return found[0].family, found[0].address


def _status(head: bytes, proxy: EgressProxy) -> tuple[int, str]:
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    version, _, rest = line.partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not (len(code) == 3 and code.isdigit()):
        raise _ours(proxy, f"not an HTTP answer to CONNECT: {receiver_text(line, 80)!r}")
    return int(code), receiver_text(reason.strip(), _REASON_CHARS)


async def open_tunnel(
    loop: asyncio.AbstractEventLoop,
    proxy: EgressProxy,
    resolver: Resolver,
    target: tuple[str, int],
    reached: list[bool],
) -> socket.socket:
    """A connected socket through ``proxy`` to ``target`` (a checked address and port).

    ``reached`` gets ``True`` appended once the proxy accepted the TCP connection,
    so a caller whose deadline ran out can tell whose fault the wait was.
    Raises :class:`LocalFault` (ours) or :class:`TunnelRefused` (the destination's).
    """
    family, address = await _proxy_address(proxy, resolver)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, (address, proxy.port))
        except OSError as exc:
            local = as_local_fault(exc)
            if local is not None:
                raise local from exc
            raise _ours(proxy, f"cannot connect: {exc.strerror or exc}") from exc
        reached.append(True)
        where = _authority(*target)
        request = f"CONNECT {where} HTTP/1.1\r\nHost: {where}\r\n\r\n".encode("ascii")
        head = bytearray()
        try:
            await loop.sock_sendall(sock, request)
            while b"\r\n\r\n" not in head:
                if len(head) > _MAX_ANSWER:
                    raise _ours(proxy, "its answer to CONNECT has no end of headers")
                chunk = await loop.sock_recv(sock, 4096)
                if not chunk:
                    raise _ours(proxy, "closed the connection without answering CONNECT")
                head += chunk
        except OSError as exc:
            raise _ours(proxy, f"connection lost during CONNECT: {exc.strerror or exc}") from exc
        code, reason = _status(bytes(head), proxy)
        if 200 <= code < 300:
            if not head.endswith(b"\r\n\r\n"):
                raise _ours(proxy, "sent data after its answer to CONNECT")
            return sock
        if code in GATEWAY_ERRORS:
            raise TunnelRefused(
                errno.ECONNREFUSED,
                f"egress proxy could not connect to {where}: {code} {reason}",
            )
        raise _ours(proxy, f"refused CONNECT {where}: {code} {reason}")
    except BaseException:
        sock.close()
        raise
