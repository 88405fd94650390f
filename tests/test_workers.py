"""``serve`` and ``api`` with several worker processes (service/server/supervisor.py).

Each test runs the real command and looks at its processes with psutil, as an operator
would: one SIGTERM stops them all, a killed supervisor takes its workers with it, a
write through one worker wakes a long poll held by another, ``serve`` runs one
dispatcher, and ``/metrics`` shows the sums over every process whichever worker answers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import psutil
import pytest

from hookrelay.service.api.release import release
from hookrelay.service.server import supervisor
from hookrelay.service.server.settings import Settings
from tests.receiver import Receiver
from tests.support import ADMIN, ROOT, bearer, dispatcher_env, eventually, free_port, hookrelay

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.processes]
HOOK = "http://127.0.0.1:9/hook"


@dataclass
class Server:
    proc: asyncio.subprocess.Process
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def children(self) -> list[psutil.Process]:
        while True:
            try:
                children: list[psutil.Process] = psutil.Process(self.proc.pid).children()
                return children
            except psutil.NoSuchProcess as exc:
                if exc.pid == self.proc.pid:
                    raise
                # A child exited while being listed: list again.

    def workers(self, role: str = supervisor.API) -> list[int]:
        """Its running children of ``role``, by their command line (``... worker ROLE PID``)."""
        found = []
        for p in self.children():
            try:
                if p.cmdline()[-2:-1] == [role] and p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p.pid)
            except psutil.Error:  # exited meanwhile
                continue
        return found


async def run(command: str, runtime, dsn: str, workers: int, **env: str) -> Server:
    """``hookrelay COMMAND --workers N``, once its banner says every worker is up."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *hookrelay(command),
        env=dispatcher_env(
            runtime, dsn, port=str(port), host="127.0.0.1", workers=str(workers), **env
        ),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    banner = b""
    while b"admin token:" not in banner:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not line:
            _, err = await proc.communicate()
            raise AssertionError(f"{command} exited {proc.returncode}: {err.decode()[-2000:]}")
        banner += line
    assert f"processes:       {workers} API workers".encode() in banner, banner
    server = Server(proc, port)
    assert len(server.children()) == workers + (command == "serve")
    return server


@pytest.fixture
async def servers() -> AsyncIterator[list[Server]]:
    started: list[Server] = []
    yield started
    for s in started:
        if s.proc.returncode is None:
            s.proc.kill()
            await s.proc.wait()


def gone(pid: int) -> bool:
    """Exited (a zombie no one has reaped yet counts: it runs no more)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def worker_of(server: Server, local_port: int) -> int | None:
    """The worker holding the connection from ``local_port``, if one has accepted it."""
    for pid in server.workers():
        for c in psutil.Process(pid).net_connections(kind="tcp"):
            if c.laddr.port == server.port and c.raddr and c.raddr.port == local_port:
                return pid
    return None


async def one_client_per_worker(server: Server) -> dict[int, httpx.AsyncClient]:
    """A keep-alive client (one connection each) per worker: new connections until each
    worker has accepted one."""
    wanted = set(server.workers())
    clients: dict[int, httpx.AsyncClient] = {}
    for _ in range(100):
        c = httpx.AsyncClient(
            base_url=server.url, timeout=60, limits=httpx.Limits(max_connections=1)
        )
        r = await c.get("/healthz")
        local_port = r.extensions["network_stream"].get_extra_info("client_addr")[1]
        pid = None
        deadline = time.monotonic() + 5
        while pid is None and time.monotonic() < deadline:
            pid = worker_of(server, local_port)
        if pid is None or pid in clients:
            await c.aclose()
        else:
            clients[pid] = c
        if set(clients) == wanted:
            return clients
    for c in clients.values():
        await c.aclose()
    raise AssertionError(f"100 connections did not reach every worker: {sorted(clients)}")


def value(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in metrics:\n{text}")


async def test_one_sigterm_stops_the_supervisor_and_every_worker(runtime, dsn, servers) -> None:
    server = await run("api", runtime, dsn, workers=2)
    servers.append(server)
    children = [p.pid for p in server.children()]
    assert len(server.workers()) == 2
    server.proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(server.proc.communicate(), 60)
    assert server.proc.returncode == 0, err.decode()[-2000:]
    assert all(gone(pid) for pid in children)
    assert b"Traceback" not in err


async def test_a_killed_supervisor_takes_its_workers_with_it(runtime, dsn, servers) -> None:
    server = await run("api", runtime, dsn, workers=2)
    servers.append(server)
    children = [p.pid for p in server.children()]
    server.proc.kill()
    await server.proc.wait()
    await eventually(lambda: all(gone(pid) for pid in children), 30, what="workers exited")


async def test_a_worker_that_dies_is_replaced(runtime, dsn, servers) -> None:
    server = await run("api", runtime, dsn, workers=2)
    servers.append(server)
    first, second = server.workers()
    os.kill(first, signal.SIGKILL)
    await eventually(
        lambda: len(server.workers()) == 2 and first not in server.workers(), 30, what="replaced"
    )
    assert second in server.workers()
    async with httpx.AsyncClient(base_url=server.url) as c:
        assert (await c.get("/readyz")).status_code == 200


async def test_a_commit_in_one_worker_wakes_a_long_poll_in_another(runtime, dsn, servers) -> None:
    server = await run("api", runtime, dsn, workers=2)
    servers.append(server)
    a, b = (await one_client_per_worker(server)).values()
    try:
        tenant = (await a.post("/v1/admin/tenants", json={"name": "w"}, headers=ADMIN)).json()
        key = bearer(tenant["apiKey"])
        body = {"type": "t", "callbackUrl": HOOK}
        task_id = (await a.post("/v1/tasks", json=body, headers=key)).json()["id"]
        version = (await a.get(f"/v1/tasks/{task_id}", headers=key)).json()["version"]
        waited = time.monotonic()
        poll = asyncio.ensure_future(
            a.get(f"/v1/tasks/{task_id}", params={"wait": "30"}, headers=key)
        )
        await asyncio.sleep(0.5)  # the poll is waiting in worker a
        assert not poll.done()
        r = await b.post(f"/v1/tasks/{task_id}/complete", json={"status": "failed"}, headers=ADMIN)
        assert r.status_code == 200, r.text
        answer = await asyncio.wait_for(poll, 30)
        # Woken by the change, well before the 30 s the poll would otherwise wait.
        assert time.monotonic() - waited < 10
        assert answer.json()["status"] == "failed" and answer.json()["version"] > version
    finally:
        await a.aclose()
        await b.aclose()


async def test_serve_runs_one_dispatcher_and_metrics_are_the_sums(runtime, dsn, servers) -> None:
    rx = await Receiver().start()
    try:
        server = await run("serve", runtime, dsn, workers=2)
        servers.append(server)
        assert len(server.workers(supervisor.API)) == 2
        assert len(server.workers(supervisor.DISPATCHER)) == 1
        clients = await one_client_per_worker(server)
        a, b = clients.values()
        try:
            before = value(
                (await a.get("/metrics", headers=ADMIN)).text,
                'hookrelay_http_requests_total{code="200"}',
            )
            tenant = (await a.post("/v1/admin/tenants", json={"name": "s"}, headers=ADMIN)).json()
            key = bearer(tenant["apiKey"])
            tasks = []
            for i in range(10):  # submitted and completed through both workers
                c = (a, b)[i % 2]
                r = await c.post(
                    "/v1/tasks", json={"type": "t", "callbackUrl": rx.url}, headers=key
                )
                assert r.status_code == 202, r.text
                tasks.append(r.json()["id"])
                r = await c.post(
                    f"/v1/tasks/{tasks[-1]}/complete", json={"status": "succeeded"}, headers=ADMIN
                )
                assert r.status_code == 200, r.text
            await rx.wait_for(10)
            await asyncio.sleep(0.5)
            # Each event delivered once: one dispatcher, not one per worker.
            ids = [r.headers["webhook-id"] for r in rx.received]
            assert len(ids) == len(set(ids)) == 10
            # Every scrape, whichever worker answers it, shows the sums over all processes:
            # the responses of both workers and the deliveries of the dispatcher's process.
            for c, answered in ((a, 1), (b, 2)):
                text = (await c.get("/metrics", headers=ADMIN)).text
                # 202s and 200s of this test, and the earlier scrapes' own answers.
                assert value(text, 'hookrelay_http_requests_total{code="202"}') == 10
                assert (
                    value(text, 'hookrelay_http_requests_total{code="200"}')
                    == before + 10 + answered
                )
                assert value(text, 'hookrelay_deliveries_total{outcome="delivered"}') == 10
                assert value(text, "hookrelay_attempt_duration_seconds_count") == 10
                assert value(text, "hookrelay_processes") == 4
                # A gauge every process sets: one series, not one per worker.
                build = f'hookrelay_build_info{{version="{release()}"}}'
                assert value(text, build) == 1 and text.count("hookrelay_build_info{") == 1
                assert value(text, "hookrelay_outbox_depth") == 0
        finally:
            for c in clients.values():
                await c.aclose()
    finally:
        await rx.stop()


def test_the_default_number_of_workers(monkeypatch) -> None:
    monkeypatch.setattr(supervisor, "usable_cpus", lambda: 16)
    assert (
        supervisor.workers_for(Settings(), with_dispatcher=False) == supervisor.MAX_DEFAULT_WORKERS
    )
    assert supervisor.workers_for(Settings(), with_dispatcher=True) == 1
    monkeypatch.setattr(supervisor, "usable_cpus", lambda: 2)
    assert supervisor.workers_for(Settings(), with_dispatcher=False) == 2
    assert supervisor.workers_for(Settings(workers=3), with_dispatcher=True) == 3
    assert Settings.from_env({"HOOKRELAY_WORKERS": "5"}).workers == 5


def test_usable_cpus_heed_a_containers_quota(tmp_path) -> None:
    everything = len(os.sched_getaffinity(0))
    assert supervisor.usable_cpus(tmp_path) == everything  # no cgroup files: the affinity
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert supervisor.usable_cpus(tmp_path) == everything
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # docker --cpus=0.5
    assert supervisor.usable_cpus(tmp_path) == 1
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")  # cgroup v1, 1 CPU
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert supervisor.usable_cpus(tmp_path) == 1


def test_metrics_directories_of_dead_supervisors_are_removed(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    dead = psutil.Process().pid + 10_000_000  # no such pid
    stale = tmp_path / f"{supervisor.METRICS_PREFIX}{dead}-x"
    stale.mkdir()
    live = tmp_path / f"{supervisor.METRICS_PREFIX}{os.getppid()}-y"
    live.mkdir()
    with supervisor.metrics_directory() as path:
        assert path.is_dir() and not list(path.iterdir())
        assert not stale.exists() and live.exists()
    assert not path.exists()
