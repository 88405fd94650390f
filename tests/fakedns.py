"""Fake DNS servers on 127.0.0.1 for tests: one that never answers, one with fixed records."""

from __future__ import annotations

import asyncio
import ipaddress
import struct
from collections import Counter
from dataclasses import dataclass, field

A, AAAA = 1, 28


def _question(packet: bytes) -> tuple[str, int, int]:
    """(lowercased name, qtype, offset after the question) of a query."""
    labels, i = [], 12
    while packet[i]:
        labels.append(packet[i + 1 : i + 1 + packet[i]].decode().lower())
        i += 1 + packet[i]
    qtype = struct.unpack("!H", packet[i + 1 : i + 3])[0]
    return ".".join(labels), qtype, i + 5


@dataclass
class FakeDns(asyncio.DatagramProtocol):
    """Answers A and AAAA queries from ``records`` (name -> (addresses, ttl)), each
    with the addresses of its family; other names NXDOMAIN.

    ``silent`` names (or every name, with ``answer_nothing``) are read and dropped,
    like a nameserver that never answers. ``asked`` counts queries per name.
    """

    records: dict[str, tuple[list[str], int]] = field(default_factory=dict)
    silent: set[str] = field(default_factory=set)
    answer_nothing: bool = False
    asked: Counter[str] = field(default_factory=Counter)
    port: int = 0
    _transport: asyncio.DatagramTransport | None = None

    @property
    def server(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> FakeDns:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: self, local_addr=("127.0.0.1", 0)
        )
        self._transport = transport
        self.port = transport.get_extra_info("sockname")[1]
        return self

    def stop(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        name, qtype, end = _question(data)
        self.asked[name] += 1
        if self.answer_nothing or name in self.silent:
            return
        found = self.records.get(name)
        answers = b""
        count = 0
        if found is not None and qtype in (A, AAAA):
            addresses, ttl = found
            for address in addresses:
                rdata = ipaddress.ip_address(address).packed
                if (qtype == A) != (len(rdata) == 4):
                    continue
                answers += struct.pack("!HHHIH", 0xC00C, qtype, 1, ttl, len(rdata)) + rdata
                count += 1
        rcode = 0 if found is not None else 3  # NOERROR, or NXDOMAIN
        query_id = struct.unpack("!H", data[:2])[0]
        header = struct.pack("!HHHHHH", query_id, 0x8180 | rcode, 1, count, 0, 0)
        assert self._transport is not None
        self._transport.sendto(header + data[12:end] + answers, addr)
