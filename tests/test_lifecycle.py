"""``hookrelay serve`` as ``docker stop`` and a crash treat it: SIGTERM, SIGINT and SIGKILL.

Each test runs the real command on an embedded PostgreSQL of its own under
a temporary directory and inspects the processes left behind, as an operator would.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import psutil
import pytest
from aiohttp import web

from hookrelay import outbox
from hookrelay.service.server.embedded_recovery import servers_for
from tests.receiver import Receiver
from tests.support import ADMIN_TOKEN, ROOT, bearer, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.processes]
ADMIN = bearer(ADMIN_TOKEN)


@pytest.fixture
def home() -> Iterator[Path]:
    """A directory of the test's own directly under the system temp dir.

    Not ``tmp_path``: run as root, the library runs PostgreSQL as another user,
    which must be able to traverse every parent, and pytest keeps its base
    temp dir private (0700).
    """
    path = Path(tempfile.mkdtemp(prefix="hookrelay-life-"))
    path.chmod(0o755)
    yield path
    for pid in servers_for(path / "data" / "pg"):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def serve_env(data: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return {
        **env,
        "HOOKRELAY_DATA_DIR": str(data),
        "HOOKRELAY_PORT": str(port),
        "HOOKRELAY_ADMIN_TOKEN": ADMIN_TOKEN,
        "HOOKRELAY_ALLOW_HTTP": "true",
        "HOOKRELAY_ALLOW_PRIVATE_CIDRS": "127.0.0.0/8",
        "HOOKRELAY_RETRY_BASE_S": "0.05",
        "HOOKRELAY_RETRY_CAP_S": "0.2",
        "HOOKRELAY_MAX_ATTEMPTS": "1000",
        "HOOKRELAY_POLL_INTERVAL_S": "0.1",
        # A row leased by a killed process is taken over once its lease ends.
        "HOOKRELAY_LEASE_S": "2",
        "HOOKRELAY_HTTP_TIMEOUT_S": "1",
    }


async def start_serve(env: dict[str, str], cwd: Path) -> tuple[asyncio.subprocess.Process, str]:
    """``hookrelay serve``; returns once its banner is out, with the banner."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hookrelay.service.cli",
        "serve",
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    first = await asyncio.wait_for(proc.stdout.readline(), 120)
    if not first:
        _, err = await proc.communicate()
        raise AssertionError(f"serve exited {proc.returncode}: {err.decode()[-2000:]}")
    rest = []
    while line := await asyncio.wait_for(proc.stdout.readline(), 10):
        if line == b"\n" or line.startswith(b"admin token:"):
            rest.append(line)
            break
        rest.append(line)
    return proc, (first + b"".join(rest)).decode()


async def stop(proc: asyncio.subprocess.Process, sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


def handles(data: Path) -> list[int]:
    path = data / "pg" / ".handle_pids.json"
    return list(json.loads(path.read_text())) if path.exists() else []


@pytest.mark.parametrize(
    ("sig", "workers"),
    [(signal.SIGTERM, 1), (signal.SIGINT, 1), (signal.SIGINT, 2)],
    ids=["SIGTERM", "SIGINT", "SIGINT-2-workers"],
)
async def test_signal_stops_serve_and_its_embedded_server(
    home: Path, sig: int, workers: int
) -> None:
    data, port = home / "data", free_port()
    env = {**serve_env(data, port), "HOOKRELAY_WORKERS": str(workers)}
    proc, banner = await start_serve(env, home)
    children = [p.pid for p in psutil.Process(proc.pid).children()]
    assert len(children) == (0 if workers == 1 else workers + 1)
    # The banner comes after the bind: the port answers as soon as it is printed.
    assert banner.startswith(f"hookrelay listening on http://127.0.0.1:{port}\n")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
        assert (await c.get("/readyz")).status_code == 200
    assert f"data directory:  {data}\n" in banner
    assert "admin token:     HOOKRELAY_ADMIN_TOKEN" in banner
    await an_executor_connects_as_the_banner_says(banner, port)
    pgdata = data / "pg"
    assert servers_for(pgdata), "the embedded server should be running"
    code, err = await stop(proc, sig)
    assert code == 0, err[-2000:]
    assert not any(psutil.pid_exists(pid) for pid in children), "a worker outlived serve"
    assert servers_for(pgdata) == [], "a postgres process outlived serve"
    assert handles(data) == []
    # initdb's chatter went to the log file, not to the terminal.
    assert "initdb" not in err and "Running commandline" not in err
    assert "initdb" in (data / "embedded-postgres.log").read_text()


async def an_executor_connects_as_the_banner_says(banner: str, port: int) -> None:
    """The banner's database url, given to a plain ``asyncpg.connect()`` as printed, is
    the service's database: an executor completes a task there (no password needed)."""
    (url,) = re.findall(r"^database url:    (\S+)$", banner, flags=re.M)
    assert url.startswith("postgresql://postgres@/postgres?host=/"), url
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
        r = await c.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)
        key = r.json()["apiKey"]
        r = await c.post(
            "/v1/tasks",
            json={"type": "t", "callbackUrl": "http://127.0.0.1:9/h"},
            headers=bearer(key),
        )
        task = r.json()["id"]
        conn = await asyncpg.connect(url)
        try:
            async with conn.transaction():
                await outbox.complete_task(conn, task, "succeeded", result={"ok": True})
        finally:
            await conn.close()
        r = await c.get(f"/v1/tasks/{task}", headers=bearer(key))
    assert (r.json()["status"], r.json()["result"]) == ("succeeded", {"ok": True})


async def test_sigkill_then_restart_recovers_and_loses_nothing(home: Path) -> None:
    async def flaky(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=204 if rx.state.get("up") else 503)

    rx = await Receiver(behaviour=flaky).start()
    data, port = home / "data", free_port()
    env = serve_env(data, port)
    try:
        proc, _ = await start_serve(env, home)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
            r = await c.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)
            key = r.json()["apiKey"]
            r = await c.post(
                "/v1/tasks", json={"type": "t", "callbackUrl": rx.url}, headers=bearer(key)
            )
            task = r.json()["id"]
            r = await c.post(
                f"/v1/tasks/{task}/complete", json={"status": "succeeded"}, headers=ADMIN
            )
            assert r.status_code == 200, r.text
        await rx.wait_for(1, timeout=30)  # being retried: the receiver answers 503
        proc.kill()
        await proc.wait()
        orphans = servers_for(data / "pg")
        assert orphans, "SIGKILL leaves the embedded server running"
        assert proc.pid in handles(data), "and the killed process still listed as using it"

        rx.state["up"] = True
        proc, _ = await start_serve(env, home)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
            for _ in range(300):
                r = await c.get(f"/v1/tasks/{task}", headers=bearer(key))
                if r.json()["delivery"]["status"] == "delivered":
                    break
                await asyncio.sleep(0.1)
            assert r.json()["status"] == "succeeded"
            assert r.json()["delivery"]["status"] == "delivered", r.text
        assert servers_for(data / "pg") == orphans, "the orphan was joined, not replaced"
        code, err = await stop(proc, signal.SIGTERM)
        assert code == 0, err[-2000:]
        # The stale handle was dropped, so this clean stop did stop the server.
        assert servers_for(data / "pg") == []
        assert handles(data) == []
    finally:
        await rx.stop()
