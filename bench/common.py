"""Shared benchmark plumbing: a database, a receiver process, percentiles, and the pages
of recorded figures (docs/operations/benchmarks.md, docs/operations/reliability.md)."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from hookrelay.outbox.store.pool import apply_schema
from tests.harness.procs import ROOT, free_port, hookrelay, peak_rss_mb, wait_for_port

# Set by ``python -m bench --record``: only then does record() rewrite the Markdown files.
RECORDING = False


def server_dsn() -> str:
    """``DATABASE_URL`` when set, else the embedded server under .hookrelay-bench/."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    from hookrelay.service.server import embedded

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


# (server, database) made by fresh_database, dropped when the benchmark exits: a run
# against someone's own server (DATABASE_URL) leaves nothing behind.
_created: list[tuple[str, str]] = []


def _drop_created() -> None:
    async def drop() -> None:
        for server, name in _created:
            conn = await asyncpg.connect(server)
            try:
                # FORCE: a child process the benchmark could not stop may still be connected.
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await conn.close()

    try:
        asyncio.run(drop())
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"could not drop the benchmark databases: {exc}", file=sys.stderr)


async def fresh_database(server: str, *, migrated: bool = True) -> str:
    """A new database on ``server`` with the schema migrated in (``migrated=False``:
    empty, for another release to migrate); returns its DSN.

    It is dropped when the process exits.
    """
    name = f"hookrelay_bench_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(server)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    if not _created:
        atexit.register(_drop_created)
    _created.append((server, name))
    dsn = urlunsplit(urlsplit(server)._replace(path="/" + name))
    if migrated:
        conn = await asyncpg.connect(dsn)
        await apply_schema(conn)
        await conn.close()
    return dsn


class ReceiverProcess:
    """bench/_receiver.py in its own process; ``args`` are its fault options."""

    def __init__(self, *args: str, hosts: int = 1) -> None:
        self.port = free_port()
        self.out = Path(tempfile.mkdtemp()) / "rx.json"
        self.hosts = [f"127.0.0.{i}" for i in range(1, hosts + 1)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench._receiver", str(self.port), str(self.out), *args]
            + ["--hosts", ",".join(self.hosts)],
            cwd=ROOT,
        )
        wait_for_port(self.port, self.proc, timeout=10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    @property
    def urls(self) -> list[str]:
        """One URL per host it listens on (``hosts=`` loopback addresses)."""
        return [f"http://{h}:{self.port}/hook" for h in self.hosts]

    def stop(self) -> dict[str, Any]:
        """Stop the receiver and return what it saw (see bench/_receiver.py)."""
        self.proc.terminate()
        self.proc.wait(10)
        return dict(json.loads(self.out.read_text()))


def start_dispatcher(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``hookrelay dispatch`` with ``env``, its logs discarded."""
    return subprocess.Popen(
        hookrelay("dispatch"),
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


# Where ``--record`` writes: pages of the docs site (docs/), rewritten section by section
# between their ``<!-- section -->`` markers; ``python -m bench quick`` reads BENCHMARKS.
BENCHMARKS = "docs/operations/benchmarks.md"
RELIABILITY = "docs/operations/reliability.md"

HEADER = (
    "# Benchmarks\n\nEvery figure is from one run on a 2-core machine; ratios are against "
    "a limit measured in the same run.\n"
)


RELIABILITY_HEADER = (
    "# Reliability\n\nFaults injected into hookrelay, what each one did, and the soak run.\n"
)


def record(
    section: str, command: str, table: str, *, file: str = BENCHMARKS, header: str = HEADER
) -> None:
    """Replace ``section`` in ``file`` (the benchmarks page) with the command and its table.

    Only under ``python -m bench ... --record``: a run to try something out leaves the
    recorded figures alone.
    """
    if not RECORDING:
        print(f"(not recorded in {file}: pass --record to write it)")
        return
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


# A callback URL's destination key as a submit keeps it (0018), for benchmarks that seed
# tasks in bulk: their completions are then one statement, as the API's are.
DESTINATION_KEY = """
INSERT INTO destination_keys (origin, host) VALUES (url_origin($1), $2)
ON CONFLICT (origin) DO NOTHING
"""
