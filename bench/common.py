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
    env = {**os.environ, "DATABASE_URL": dsn, "HOOKRELAY_MASTER_KEY": key,
           "HOOKRELAY_ADMIN_TOKEN": "bench", "HOOKRELAY_ALLOW_HTTP": "true",
           "HOOKRELAY_ALLOW_PRIVATE_CIDRS": "127.0.0.0/8", "HOOKRELAY_LOG_LEVEL": "WARNING"}
    env.update({f"HOOKRELAY_{k.upper()}": str(v) for k, v in extra.items()})
    return env


def wait_for_port(port: int, proc: subprocess.Popen[bytes] | None = None,
                  timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on port {port}")


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
