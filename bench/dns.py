"""Tenant Y's submit latency while tenant X's callback names never answer in DNS.

One ``hookrelay serve`` process (API and dispatcher) uses a fake nameserver on
127.0.0.1 that answers Y's name and reads and drops every query for X's names.
Y submits ``--submits`` tasks first alone (the baseline), then while X keeps 16
submits in flight to fresh never-answering names; the ratio of Y's p99 is the
figure. Y's tasks are then completed and their webhooks delivered through the
same DNS: the table also counts Y's events lost to dead letters, and checks that
every X submit got its 422 at the deadline.

    python -m bench dns [--submits 300] [--hanging 16]
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import subprocess
import time
from itertools import count

import asyncpg
import httpx

from bench.common import ReceiverProcess, fresh_database, percentile, record, server_dsn
from tests.harness.procs import ROOT, free_port, hookrelay, master_key, service_env, wait_for_port

ADMIN = {"Authorization": "Bearer bench"}
Y_NAME = "y.bench.test"


class Nameserver(asyncio.DatagramProtocol):
    """Answers A queries for Y's name with 127.0.0.1; drops every other query."""

    transport: asyncio.DatagramTransport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a datagram endpoint's

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        labels, i = [], 12
        while data[i]:
            labels.append(data[i + 1 : i + 1 + data[i]].decode().lower())
            i += 1 + data[i]
        qtype = struct.unpack("!H", data[i + 1 : i + 3])[0]
        if ".".join(labels) != Y_NAME:
            return  # X's names: never answered
        answer = struct.pack("!HHHIH", 0xC00C, 1, 1, 300, 4) + bytes([127, 0, 0, 1])
        n = 1 if qtype == 1 else 0
        header = struct.pack("!HHHHHH", struct.unpack("!H", data[:2])[0], 0x8180, 1, n, 0, 0)
        self.transport.sendto(header + data[12 : i + 5] + (answer if n else b""), addr)


async def y_submits(
    c: httpx.AsyncClient, key: str, url: str, n: int
) -> tuple[list[float], list[str]]:
    """``n`` submits of Y, four at a time: (latencies in ms, task ids)."""
    lat: list[float] = []
    ids: list[str] = []
    it = iter(range(n))

    async def worker() -> None:
        for _ in it:
            t = time.perf_counter()
            r = await c.post(
                "/v1/tasks", json={"type": "b", "callbackUrl": url}, headers=key_h(key)
            )
            lat.append((time.perf_counter() - t) * 1000)
            assert r.status_code == 202, r.text
            ids.append(r.json()["id"])

    await asyncio.gather(*(worker() for _ in range(4)))
    return lat, ids


def key_h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submits", type=int, default=300)
    parser.add_argument("--hanging", type=int, default=16)
    args = parser.parse_args()

    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(Nameserver, local_addr=("127.0.0.1", 0))
    ns_port = transport.get_extra_info("sockname")[1]
    rx = ReceiverProcess()
    dsn = await fresh_database(server_dsn())
    port = free_port()
    env = service_env(dsn, master_key(), dns_servers=f"127.0.0.1:{ns_port}", port=port)
    proc = subprocess.Popen(hookrelay("serve"), env=env, cwd=ROOT, stderr=subprocess.DEVNULL)
    x_answers: list[tuple[int, str, float]] = []
    try:
        wait_for_port(port, proc)
        y_url = f"http://{Y_NAME}:{rx.port}/hook"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
            x = (await c.post("/v1/admin/tenants", json={"name": "x"}, headers=ADMIN)).json()
            y = (await c.post("/v1/admin/tenants", json={"name": "y"}, headers=ADMIN)).json()
            await y_submits(c, y["apiKey"], y_url, 20)  # warm-up: connections, Y's DNS answer
            before, ids = await y_submits(c, y["apiKey"], y_url, args.submits)

            stop = asyncio.Event()
            names = count()

            async def hang() -> None:
                while not stop.is_set():
                    body = {"type": "b", "callbackUrl": f"http://x{next(names)}.hang.test/h"}
                    t = time.perf_counter()
                    r = await c.post("/v1/tasks", json=body, headers=key_h(x["apiKey"]))
                    x_answers.append((r.status_code, r.text, time.perf_counter() - t))

            xs = [asyncio.create_task(hang()) for _ in range(args.hanging)]
            await asyncio.sleep(0.5)  # every X lookup is out
            during, more = await y_submits(c, y["apiKey"], y_url, args.submits)
            stop.set()
            await asyncio.gather(*xs)
            for tid in ids + more:
                r = await c.post(
                    f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN
                )
                assert r.status_code == 200, r.text
        conn = await asyncpg.connect(dsn)
        try:
            while await conn.fetchval("SELECT count(*) FROM outbox"):
                await asyncio.sleep(0.1)
            dead = await conn.fetchval(
                "SELECT count(*) FROM dead_letters WHERE tenant_id = $1", y["id"]
            )
            delivered_first = await conn.fetchval(
                "SELECT count(*) FROM delivery_attempts WHERE tenant_id = $1 AND number = 1"
                " AND outcome = 'delivered'",
                y["id"],
            )
        finally:
            await conn.close()
    finally:
        proc.terminate()
        proc.wait(30)
        transport.close()
        rx.stop()

    x_dns_422 = sum(1 for s, text, _ in x_answers if s == 422 and "no DNS answer" in text)
    x_wait = sorted(w for _, _, w in x_answers)
    ratio = percentile(during, 0.99) / percentile(before, 0.99)
    table = (
        f"{args.submits} submits of tenant Y (4 at a time) to `{Y_NAME}`, alone and while tenant X "
        f"keeps {args.hanging} submits in flight to names whose DNS never answers; "
        "`hookrelay serve`, default DNS deadlines (submit 2 s)\n\n"
        "| Y's submits | p50 ms | p99 ms |\n|---|---|---|\n"
        f"| alone (baseline) | {percentile(before, 0.5):.1f} | {percentile(before, 0.99):.1f} |\n"
        f"| while X's lookups hang | {percentile(during, 0.5):.1f} | "
        f"{percentile(during, 0.99):.1f} |\n"
        f"| ratio p99 (hanging / alone) | | {ratio:.2f}x |\n\n"
        f"X: {len(x_answers)} submits, {x_dns_422} answered 422 for DNS, median wait "
        f"{percentile(x_wait, 0.5):.2f} s. Y: {2 * args.submits} events, "
        f"{delivered_first} delivered at the first attempt, {dead} dead-lettered.\n"
    )
    print(table)
    record(
        "dns: a tenant whose DNS never answers",
        f"python -m bench dns --submits {args.submits} --hanging {args.hanging}",
        table,
    )
