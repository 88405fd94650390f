"""What the tests share besides fixtures: credentials, waiting, backlogs, hookrelay processes.

Fixtures stay in conftest.py; everything a test imports by name lives here. The process
plumbing (ports, environment, command line) and ``eventually`` come from ``harness``,
which the benchmarks use too, so both start hookrelay the same way; tests import no
benchmark code.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import os
import secrets
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

from hookrelay.outbox import complete_task
from hookrelay.outbox.dispatch.dispatcher import Dispatcher, running
from hookrelay.outbox.models import EventId
from hookrelay.outbox.store import changes, delivery
from hookrelay.outbox.store.delivery import ClaimedEvent
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import NewKeys, NewTenant, create_tenant
from hookrelay.service.server.background import make_dispatcher
from hookrelay.service.server.prerequisites import Runtime
from tests.harness import procs
from tests.harness.procs import ROOT as ROOT
from tests.harness.procs import free_port as free_port
from tests.harness.procs import hookrelay as hookrelay
from tests.harness.procs import master_key as master_key
from tests.harness.procs import service_env as service_env
from tests.harness.waiting import eventually as eventually

ADMIN_TOKEN = "test-admin-" + secrets.token_hex(8)
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def v1_secret(keys: NewTenant | NewKeys) -> str:
    """The ``whsec_`` secret of a v1 (or both) tenant or rotation; a v1a-only one has none."""
    assert keys.signing_secret is not None, "a v1a-only tenant has no HMAC secret"
    return keys.signing_secret


def with_database(dsn: str, name: str) -> str:
    """``dsn`` pointed at database ``name`` on the same server."""
    return urlunsplit(urlsplit(dsn)._replace(path="/" + name))


async def clone_template(server_dsn: str, template_db: str) -> str:
    """A new database cloned from the migrated template; its name."""
    name = f"hookrelay_t_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(server_dsn)
    try:
        # A copy of the template's files is five times as fast as logging every block
        # (the default, WAL_LOG), but it takes two checkpoints: cheap only without fsync
        # (the embedded server's, _throwaway), so a server of yours keeps the default.
        quick = await conn.fetchval("SHOW fsync") == "off"
        strategy = " STRATEGY FILE_COPY" if quick else ""
        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"{strategy}')
    finally:
        await conn.close()
    return name


async def purge_changes(pool: asyncpg.Pool, where: str, *args: Any) -> None:
    """Delete the status streams' logged changes ``where`` holds, as retention would:
    once every change committed so far is numbered (a queued one is not purged)."""
    async with pool.acquire() as conn:
        await changes.number_pending(conn)
        await conn.execute(f"DELETE FROM task_changes WHERE {where}", *args)


# -- dispatching in the test's own loop --------------------------------------------------


async def backlog(
    pool: asyncpg.Pool, runtime: Runtime, url: str, n: int, tenant: NewTenant | None = None
) -> tuple[NewTenant, list[EventId]]:
    """``n`` succeeded tasks whose events wait in the outbox; returns their event ids."""
    async with pool.acquire() as conn:
        if tenant is None:
            tenant = await create_tenant(conn, "acme", runtime.secret_box)
        events = []
        async with conn.transaction():
            for i in range(n):
                task, _ = await create_task(conn, tenant.id, NewTask(type="t", callback_url=url))
                done = await complete_task(conn, task.id, "succeeded", result={"i": i})
                assert done.event_id is not None
                events.append(done.event_id)
    return tenant, events


async def dead_letters_of_two_tenants(
    pool: asyncpg.Pool, runtime: Runtime, url: str
) -> dict[str, tuple[NewTenant, list[EventId]]]:
    """Three dead events of tenant "a", two of tenant "b", all sent to a failing ``url``."""
    a, a_events = await backlog(pool, runtime, url, 3)
    async with pool.acquire() as conn:
        b = await create_tenant(conn, "b", runtime.secret_box)
    _, b_events = await backlog(pool, runtime, url, 2, b)
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
    assert await pool.fetchval("SELECT count(*) FROM dead_letters") == 5
    return {"a": (a, a_events), "b": (b, b_events)}


def dispatcher(runtime: Runtime, pool: asyncpg.Pool) -> Dispatcher:
    """A dispatcher wired exactly as ``hookrelay dispatch`` wires it."""
    return make_dispatcher(runtime, pool)


async def wait_drained(pool: asyncpg.Pool, timeout: float = 20.0) -> None:
    """Until the outbox is empty; on failure, show the first rows still in it."""
    try:
        await eventually(lambda: outbox_empty(pool), timeout)
    except AssertionError:
        left = await pool.fetch("SELECT event_id, attempts, last_error FROM outbox LIMIT 5")
        raise AssertionError(f"outbox not drained: {[dict(r) for r in left]}") from None


async def claim_due(
    conn: asyncpg.Connection, *, limit: int, lease_s: float, owner: str, token: uuid.UUID
) -> list[ClaimedEvent]:
    """Up to ``limit`` due events, lane by lane as the scheduler would find them."""
    lanes, left = [], limit
    for lane in await delivery.due_lanes(conn, upto=limit):
        if left > 0:
            lanes.append((lane.host, lane.tenant_id, min(left, lane.due)))
            left -= lane.due
    return await delivery.claim_lanes(conn, lanes=lanes, lease_s=lease_s, owner=owner, token=token)


async def outbox_empty(pool: asyncpg.Pool) -> bool:
    return not await pool.fetchval("SELECT count(*) FROM outbox")


# -- hookrelay as child processes --------------------------------------------------------


def dispatcher_env(runtime: Runtime, dsn: str, **overrides: str) -> dict[str, str]:
    """Fast retries and short leases, loopback allowed; ``overrides`` are HOOKRELAY_* names."""
    s = runtime.settings
    assert s.master_key, "the runtime fixture sets a master key"
    fast = {
        "data_dir": str(s.data_dir),
        "lease_s": "2",
        "http_timeout_s": "1",
        "retry_base_s": "0.05",
        "retry_cap_s": "0.2",
        "poll_interval_s": "0.1",
        "batch_size": "50",
        "per_host_concurrency": "50",
        # As the runtime's own settings: a failing receiver exhausts attempts rather than
        # opening the circuit, whose next probe could come after the test stops waiting.
        "breaker_threshold": str(s.breaker_threshold),
        "breaker_probe_s": str(s.breaker_probe_s),
    }
    return service_env(dsn, s.master_key, admin_token=ADMIN_TOKEN, **{**fast, **overrides})


async def start(command: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    """``hookrelay <command>`` as a child process (stderr piped, for its logs)."""
    return await asyncio.create_subprocess_exec(
        *hookrelay(command),
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


async def start_dispatcher(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await start("dispatch", env)


async def wait_for_port(port: int, proc: asyncio.subprocess.Process, timeout: float = 30) -> None:
    """Until something accepts on ``port``; fails at once with its logs if ``proc`` exits."""

    async def listening() -> bool:
        if proc.returncode is not None:
            err = await proc.stderr.read() if proc.stderr else b""
            raise AssertionError(f"process exited {proc.returncode}: {err.decode()[-2000:]}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        writer.close()
        return True

    await eventually(listening, timeout, what=f"something listening on {port}")


@contextlib.asynccontextmanager
async def serving(command: str, env: dict[str, str]) -> AsyncIterator[str]:
    """``hookrelay <command>`` on a free port until exit; yields its base URL."""
    port = free_port()
    proc = await start(command, {**env, "HOOKRELAY_HOST": "127.0.0.1", "HOOKRELAY_PORT": str(port)})
    try:
        await wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def submit_and_complete(c: httpx.AsyncClient, key: str, url: str) -> str:
    """Submit a task to ``url`` as the tenant of ``key`` and complete it; its id."""
    r = await c.post("/v1/tasks", json={"type": "t", "callbackUrl": url}, headers=bearer(key))
    assert r.status_code == 202, r.text
    task_id: str = r.json()["id"]
    r = await c.post(f"/v1/tasks/{task_id}/complete", json={"status": "succeeded"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    return task_id


async def run_cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """``hookrelay *args`` to completion: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *hookrelay(args[0], *args[1:]),
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


def cli_env(runtime: Runtime, dsn: str) -> dict[str, str]:
    """What an operator exports before running a ``hookrelay`` command."""
    return {
        "DATABASE_URL": dsn,
        "HOOKRELAY_MASTER_KEY": runtime.settings.master_key or "",
        "HOOKRELAY_ADMIN_TOKEN": ADMIN_TOKEN,
        "HOOKRELAY_DATA_DIR": str(runtime.settings.data_dir),
    }


# -- hookrelay serve for a whole module, and a network that loses answers -----------------


class ServeProcess:
    """``hookrelay serve`` as a child process on one port that it keeps across restarts."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.port = free_port()
        self.env = {**env, "HOOKRELAY_HOST": "127.0.0.1", "HOOKRELAY_PORT": str(self.port)}
        self.logs = logs
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.logs.open("ab") as log:
            self.proc = subprocess.Popen(
                hookrelay("serve"), env=self.env, cwd=ROOT, stdout=log, stderr=log
            )
        try:
            procs.wait_for_port(self.port, self.proc)
        except RuntimeError:
            raise AssertionError(f"serve did not start: {self.logs.read_text()[-2000:]}") from None

    def stop(self) -> None:
        """SIGTERM, as a deployment does: streams and long polls end cleanly first."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)
        self.proc = None

    def tenant(self, scheme: str = "v1") -> dict[str, Any]:
        """A new tenant: its id, apiKey, signingSecret and publicKey."""
        body = {"name": "partner", "signatureScheme": scheme}
        r = httpx.post(f"{self.url}/v1/admin/tenants", json=body, headers=ADMIN, timeout=30)
        assert r.status_code == 201, r.text
        return dict(r.json())


def module_serve(dsn: str, tmp_path_factory: Any, **settings: str) -> Iterator[ServeProcess]:
    """A module's ``hookrelay serve`` on ``dsn``: fast retries, loopback callbacks allowed,
    ``settings`` (by lower-case name) on top."""
    data = tmp_path_factory.mktemp("serve")
    env = service_env(
        dsn,
        master_key(),
        admin_token=ADMIN_TOKEN,
        data_dir=str(data),
        max_attempts="3",
        retry_base_s="0.05",
        retry_cap_s="0.2",
        poll_interval_s="0.1",
        http_timeout_s="2",
        **settings,
    )
    serve = ServeProcess(env, data / "serve.log")
    serve.start()
    yield serve
    serve.stop()


class LosingProxy:
    """A TCP proxy to 127.0.0.1:``port`` that loses the answer on its first ``lose``
    connections: the request reaches the server, which acts on it and answers, and the
    client sees its connection close instead. Later connections pass both ways."""

    def __init__(self, port: int, lose: int = 1) -> None:
        self.target, self.lose, self.lost = port, lose, 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:  # closed
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                self.sockets += [client, upstream]
                losing = self.lost < self.lose
                self.lost += losing
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            if losing:
                threading.Thread(target=self._lose, args=(client, upstream), daemon=True).start()
            else:
                threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    @staticmethod
    def _lose(client: socket.socket, upstream: socket.socket) -> None:
        with contextlib.suppress(OSError):
            upstream.recv(65536)  # the answer has begun: the server has done the work
        for s in (client, upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.server.close()
        with self._lock:
            for s in self.sockets:
                s.close()


def until(predicate: Callable[[], Any], timeout: float = 10.0, *, what: str = "") -> Any:
    """:func:`eventually` for blocking tests: ``predicate`` until truthy; returns that."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            name = what or getattr(predicate, "__qualname__", repr(predicate))
            raise AssertionError(f"not true after {timeout:g} s: {name} (last: {value!r})")
        time.sleep(0.02)
    return value


class WebhookSink:
    """A webhook receiver in a thread on 127.0.0.1: answers 204, keeps (headers, body)."""

    def __init__(self) -> None:
        received: list[tuple[dict[str, str], bytes]] = []
        self.received = received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                received.append((dict(self.headers), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
