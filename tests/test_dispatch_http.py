"""``hookrelay dispatch``'s own port: /metrics (admin or metrics token), /healthz, /readyz.

The process tests run the real command, deliver to a loopback receiver and scrape the
dispatcher itself: its counters are seen nowhere else.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from importlib.metadata import version
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest
from aiohttp import web

from hookrelay.outbox.dispatch.dispatcher import Dispatcher
from hookrelay.service.server.dispatch_http import claim_loop_readiness
from hookrelay.service.server.prerequisites import ADMIN_TOKEN_FILE, existing_admin_token
from hookrelay.service.server.settings import Settings
from tests.receiver import Receiver
from tests.support import (
    ADMIN,
    ROOT,
    backlog,
    bearer,
    cli_env,
    dispatcher_env,
    eventually,
    free_port,
    hookrelay,
    run_cli,
    start,
    wait_drained,
    wait_for_port,
)

pytestmark = [pytest.mark.anyio, pytest.mark.processes]
METRICS_TOKEN = "test-metrics-token"
DELIVERED = 'hookrelay_deliveries_total{outcome="delivered"}'


def sample(text: str, series: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


async def test_dispatch_serves_its_metrics_health_and_readiness(pool, runtime, dsn) -> None:
    port = free_port()
    env = dispatcher_env(
        runtime, dsn, host="127.0.0.1", metrics_port=str(port), metrics_token=METRICS_TOKEN
    )
    rx = await Receiver().start()
    proc = await start("dispatch", env)
    try:
        await wait_for_port(port, proc)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            r = await c.get("/healthz")
            assert r.status_code == 200
            assert r.json() == {"status": "ok", "version": version("hookrelay-server")}

            async def ready() -> bool:
                r = await c.get("/readyz")
                return r.status_code == 200 and r.json() == {"status": "ok"}

            await eventually(ready, what="/readyz of the dispatcher")

            for wrong in ({}, bearer("nope"), {"Authorization": "Basic x"}):
                r = await c.get("/metrics", headers=wrong)
                assert r.status_code == 401, r.text
                assert r.json()["error"]["code"] == "unauthorized"
            for good in (ADMIN, bearer(METRICS_TOKEN)):
                r = await c.get("/metrics", headers=good)
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
            # Its own counters, and the database gauges the API shows too.
            assert "# TYPE hookrelay_local_faults_total counter" in r.text
            assert sample(r.text, "hookrelay_outbox_depth") == 0
            assert sample(r.text, DELIVERED) is None  # nothing delivered yet
            release = version("hookrelay-server")
            assert sample(r.text, f'hookrelay_build_info{{version="{release}"}}') == 1

            await backlog(pool, runtime, rx.url, 3)
            await rx.wait_for(3, timeout=30)
            await wait_drained(pool)

            async def counted() -> bool:
                text = (await c.get("/metrics", headers=bearer(METRICS_TOKEN))).text
                return sample(text, DELIVERED) == 3

            await eventually(counted, what="3 deliveries in the dispatcher's /metrics")
            text = (await c.get("/metrics", headers=ADMIN)).text
            assert sample(text, "hookrelay_attempt_duration_seconds_count") == 3

            # A second dispatcher on this host needs a port of its own.
            code, out, err = await run_cli("dispatch", env=env)
            assert code == 2 and err.count("\n") == 1, err
            assert f"port {port} on 127.0.0.1 is already in use" in err
            assert "HOOKRELAY_METRICS_PORT" in err and "started" not in out
            assert (await c.get("/healthz")).status_code == 200

        proc.send_signal(signal.SIGTERM)
        _, logs = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, logs.decode()[-2000:]
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, "the port outlived the process"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await rx.stop()


async def test_a_busy_metrics_port_is_one_clear_line(runtime, dsn) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            **cli_env(runtime, dsn),
            "HOOKRELAY_HOST": "127.0.0.1",
            "HOOKRELAY_METRICS_PORT": str(port),
        }
        code, out, err = await run_cli("dispatch", env=env)
    assert code == 2 and err.count("\n") == 1, err
    assert f"port {port} on 127.0.0.1 is already in use" in err
    assert "HOOKRELAY_METRICS_PORT" in err and "--port" not in err
    assert out == ""  # refused before the database was opened


async def test_metrics_port_off_serves_nothing(runtime, dsn) -> None:
    proc = await asyncio.create_subprocess_exec(
        *hookrelay("dispatch"),
        env=dispatcher_env(runtime, dsn, metrics_port="off"),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        banner = []
        while line := (await asyncio.wait_for(proc.stdout.readline(), 60)).decode():
            banner.append(line)
            if line.startswith("metrics:"):
                break
        assert "metrics:         off (HOOKRELAY_METRICS_PORT)\n" in banner, banner
    finally:
        proc.send_signal(signal.SIGTERM)
        _, logs = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, logs.decode()[-2000:]


def _dispatcher(turned_ago_s: float, *, stopping: bool = False) -> Dispatcher:
    fake: Any = SimpleNamespace(
        config=SimpleNamespace(lease_s=30.0),
        stopping=stopping,
        turned_at=time.monotonic() - turned_ago_s,
    )
    return cast(Dispatcher, fake)


async def test_readiness_follows_the_claim_loop() -> None:
    never = asyncio.get_running_loop().create_future()
    running = asyncio.ensure_future(never)
    try:
        assert claim_loop_readiness(_dispatcher(0), lambda: None)() == (
            "the dispatcher is starting"
        )
        assert claim_loop_readiness(_dispatcher(0.5), lambda: running)() is None
        stuck = claim_loop_readiness(_dispatcher(45), lambda: running)()
        assert stuck is not None and "has not gone round for 45 s" in stuck
        assert claim_loop_readiness(_dispatcher(0, stopping=True), lambda: running)() == (
            "the dispatcher is stopping"
        )
    finally:
        running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert claim_loop_readiness(_dispatcher(0), lambda: running)() == "the dispatcher has stopped"


def test_dispatch_reads_the_admin_token_but_never_makes_one(tmp_path) -> None:
    assert existing_admin_token(Settings(admin_token="from-env", data_dir=tmp_path)) == "from-env"
    assert existing_admin_token(Settings(data_dir=tmp_path)) == ""
    assert not (tmp_path / ADMIN_TOKEN_FILE).exists()
    (tmp_path / ADMIN_TOKEN_FILE).write_text("hra_serves-token\n")
    assert existing_admin_token(Settings(data_dir=tmp_path)) == "hra_serves-token"


async def test_port_stays_up_while_the_dispatcher_drains(pool, runtime, dsn) -> None:
    async def slow(request: web.Request, rx: Receiver) -> web.StreamResponse:
        await asyncio.sleep(2)
        return web.Response(status=204)

    port = free_port()
    env = dispatcher_env(
        runtime, dsn, host="127.0.0.1", metrics_port=str(port), http_timeout_s="5", lease_s="10"
    )
    rx = await Receiver(behaviour=slow).start()
    proc = await start("dispatch", env)
    try:
        await wait_for_port(port, proc)
        await backlog(pool, runtime, rx.url, 1)
        await rx.wait_for(1, timeout=30)  # the attempt is in flight
        proc.send_signal(signal.SIGTERM)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as c:

            async def draining() -> bool:
                r = await c.get("/readyz")
                return r.status_code == 503 and "stopping" in r.json()["error"]["message"]

            await eventually(draining, what="/readyz 503 while the dispatcher drains")
            r = await c.get("/metrics", headers=ADMIN)
            assert r.status_code == 200
        _, logs = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, logs.decode()[-2000:]
        # The attempt in flight finished before the process left.
        assert await pool.fetchval("SELECT count(*) FROM outbox") == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await rx.stop()
