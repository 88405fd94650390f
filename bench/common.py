"""Shared benchmark plumbing: a database, a receiver process, percentiles, BENCHMARKS.md."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg

from outbox.db import apply_schema

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_dsn() -> str:
    """``DATABASE_URL`` when set, else the embedded server under .hookrelay-bench/."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    from service import embedded

    return embedded.start(ROOT / ".hookrelay-bench")


async def server_facts(dsn: str) -> str:
    """The server's version and autovacuum setting, to print beside database figures."""
    conn = await asyncpg.connect(dsn)
    try:
        version = await conn.fetchval("SHOW server_version")
        autovacuum = await conn.fetchval("SHOW autovacuum")
    finally:
        await conn.close()
    return f"PostgreSQL {version.split()[0]}, autovacuum {autovacuum}"


async def fresh_database(server: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    name = f"hookrelay_bench_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(server)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    dsn = urlunsplit(urlsplit(server)._replace(path="/" + name))
    conn = await asyncpg.connect(dsn)
    await apply_schema(conn)
    await conn.close()
    return dsn


class ReceiverProcess:
    """bench/receiver.py in its own process; ``args`` are its fault options."""

    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.out = Path(tempfile.mkdtemp()) / "rx.json"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "bench" / "receiver.py"),
                str(self.port),
                str(self.out),
                *args,
            ]
        )
        wait_for_port(self.port, self.proc, timeout=10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def stop(self) -> dict[str, object]:
        import json

        self.proc.terminate()
        self.proc.wait(10)
        return dict(json.loads(self.out.read_text()))


def master_key() -> str:
    """A fresh ``HOOKRELAY_MASTER_KEY`` (32 random bytes, urlsafe base64)."""
    import base64
    import secrets

    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def service_env(dsn: str, key: str, **extra: object) -> dict[str, str]:
    """The environment a benchmark's hookrelay process runs with: loopback allowed."""
    env = {
        **os.environ,
        "DATABASE_URL": dsn,
        "HOOKRELAY_MASTER_KEY": key,
        "HOOKRELAY_ADMIN_TOKEN": "bench",
        "HOOKRELAY_ALLOW_HTTP": "true",
        "HOOKRELAY_ALLOW_PRIVATE_CIDRS": "127.0.0.0/8",
        "HOOKRELAY_LOG_LEVEL": "WARNING",
    }
    env.update({f"HOOKRELAY_{k.upper()}": str(v) for k, v in extra.items()})
    return env


def wait_for_port(
    port: int, proc: subprocess.Popen[bytes] | None = None, timeout: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on port {port}")


def peak_rss_mb(pid: int) -> float:
    """The process's high-water resident set (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_dispatcher(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "dispatch"],
        env=env,
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )


async def outbox_empty(conn: asyncpg.Connection) -> bool:
    # An index probe, not count(*): a scan of a deep outbox every few
    # milliseconds would load the very database being measured.
    return await conn.fetchval("SELECT id FROM outbox ORDER BY id LIMIT 1") is None


async def seconds_to_drain(conn: asyncpg.Connection) -> float:
    """Seconds from the first attempt to an empty outbox."""
    while not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM delivery_attempts)"):
        await asyncio.sleep(0.01)
    first = time.perf_counter()
    while not await outbox_empty(conn):
        await asyncio.sleep(0.02)
    return time.perf_counter() - first


async def drain(dsn: str, env: dict[str, str], n: int) -> tuple[float, float]:
    """Run one dispatcher until the outbox is empty: (delivered/s, its peak RSS in MB).

    The clock starts at the first delivery, so process start-up is not counted.
    """
    conn = await asyncpg.connect(dsn)
    proc = start_dispatcher(env)
    try:
        return n / await seconds_to_drain(conn), peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
        await conn.close()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


HEADER = (
    "# Benchmarks\n\nEvery figure is from one run on a 2-core machine; ratios are against "
    "a limit measured in the same run.\n"
)


RELIABILITY_HEADER = (
    "# Reliability\n\nFaults injected into hookrelay, what each one did, and the soak run.\n"
)


def record(
    section: str, command: str, table: str, *, file: str = "BENCHMARKS.md", header: str = HEADER
) -> None:
    """Replace ``section`` in ``file`` (BENCHMARKS.md) with the command and its table."""
    path = ROOT / file
    text = path.read_text() if path.exists() else header
    marker = f"<!-- {section} -->"
    block = f"{marker}\n## {section}\n\n```\n{command}\n```\n\n{table}\n{marker}-end\n"
    if marker in text:
        start = text.index(marker)
        end = text.index(f"{marker}-end") + len(f"{marker}-end\n")
        text = text[:start] + block + text[end:]
    else:
        text = text.rstrip() + "\n\n" + block
    path.write_text(text)


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]
