"""Hostile clients against the API: before (stock uvicorn httptools) and after (protocol.py).

    python -m bench.attacks            # both attacks, both servers; prints the figures

1. One request with a 128 MB header: time until the server answers (or drops the
   connection), the server's RSS growth, and the longest /healthz stall meanwhile.
2. 1,050 slow clients (a request line and no more) against a server whose open-file
   limit is 1,024: how many of 20 new connections get an HTTP answer meanwhile, and
   how long until /healthz answers 200 again.

Each server is the real app (``create_app``) on a fresh database, in its own process.
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import fresh_database, server_dsn
from tests.harness.procs import ROOT, free_port, wait_for_port

HEADER_MB = 128
SLOW_CLIENTS = 1050
FD_LIMIT = 1024


def serve(mode: str, port: int, dsn: str) -> None:  # pragma: no cover - child process
    import uvicorn

    from hookrelay.service.server import event_loop as serving
    from hookrelay.service.server.app import create_app
    from hookrelay.service.server.prerequisites import prepare
    from hookrelay.service.server.settings import Settings

    settings = Settings(database_url=dsn, data_dir=Path(tempfile.mkdtemp()), admin_token="bench")
    config = serving.uvicorn_config(
        create_app(prepare(settings)),
        host="127.0.0.1",
        port=port,
        limits=serving.ConnectionLimits(
            max_connections=serving.descriptor_cap(settings.max_connections, 84)
        ),
    )
    if mode == "before":
        config.http = "httptools"  # what uvicorn serves by default
    serving.run(uvicorn.Server(config).serve())


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _healthz(port: int, timeout: float = 30.0) -> tuple[int, float]:
    """(status, seconds) of one GET /healthz on a new connection; status 0 if it failed."""
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
        line = await asyncio.wait_for(reader.readline(), timeout)
        writer.close()
        status = int(line.split()[1]) if line.startswith(b"HTTP/") else 0
    except (OSError, TimeoutError, IndexError, ValueError):
        status = 0
    return status, time.perf_counter() - t0


async def big_header(port: int, pid: int) -> dict[str, float]:
    rss0, peak, stall = rss_mb(pid), 0.0, 0.0
    done = asyncio.Event()

    async def probe() -> None:
        nonlocal peak, stall
        while not done.is_set():
            peak = max(peak, rss_mb(pid))
            _, took = await _healthz(port)
            stall = max(stall, took)
            await asyncio.sleep(0.05)

    prober = asyncio.create_task(probe())
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.perf_counter()
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: b\r\nX-Big: ")
    chunk = b"a" * 2**20
    answered = asyncio.create_task(reader.readline())
    try:
        for _ in range(HEADER_MB):
            if answered.done():
                break
            writer.write(chunk)
            await writer.drain()
        writer.write(b"\r\n\r\n")
        line = await asyncio.wait_for(answered, 60)
    except (OSError, TimeoutError):
        line = answered.result() if answered.done() and not answered.exception() else b""
    took = time.perf_counter() - t0
    writer.close()
    done.set()
    await prober
    status = int(line.split()[1]) if line.startswith(b"HTTP/") else 0
    return {"status": status, "answer_s": took, "rss_growth_mb": peak - rss0, "stall_s": stall}


async def slow_clients(port: int) -> dict[str, float]:
    held = []
    for _ in range(SLOW_CLIENTS):
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
            w.write(b"GET /healthz HTTP/1.1\r\n")
            held.append(w)
        except (OSError, TimeoutError):
            pass
    await asyncio.sleep(0.5)
    results = await asyncio.gather(*(_healthz(port, timeout=5) for _ in range(20)))
    answered = sum(1 for status, _ in results if status)
    t0 = time.perf_counter()
    while (await _healthz(port, timeout=5))[0] != 200 and time.perf_counter() - t0 < 120:
        await asyncio.sleep(0.5)
    recovered = time.perf_counter() - t0
    for w in held:
        w.close()
    return {"held": len(held), "new_answered_of_20": answered, "healthz_200_after_s": recovered}


async def run_mode(mode: str, dsn: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for attack in ("big_header", "slow_clients"):
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.attacks", "serve", mode, str(port), dsn],
            cwd=ROOT,
            preexec_fn=_limit_fds,
        )
        try:
            wait_for_port(port, proc)
            if attack == "big_header":
                out[attack] = await big_header(port, proc.pid)
            else:
                out[attack] = await slow_clients(port)
        finally:
            proc.terminate()
            proc.wait(10)
    return out


async def main() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the attacker needs > 1,050
    dsn = await fresh_database(server_dsn())
    for mode in ("before", "after"):
        for attack, figures in (await run_mode(mode, dsn)).items():
            shown = ", ".join(
                f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()
            )
            print(f"{mode:6} {attack:12} {shown}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        asyncio.run(main())
    os._exit(0)
