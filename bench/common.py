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
    def __init__(self) -> None:
        self.port = free_port()
        self.out = Path(tempfile.mkdtemp()) / "rx.json"
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "receiver.py"), str(self.port), str(self.out)]
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("receiver did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def stop(self) -> dict[str, object]:
        import json

        self.proc.terminate()
        self.proc.wait(10)
        return dict(json.loads(self.out.read_text()))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


HEADER = (
    "# Benchmarks\n\nEvery figure is from one run on a 2-core machine; ratios are against "
    "a limit measured in the same run.\n"
)


def record(section: str, command: str, table: str) -> None:
    """Replace ``section`` in BENCHMARKS.md with the command and its table."""
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text() if path.exists() else HEADER
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
