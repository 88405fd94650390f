"""Shared fixtures: a real PostgreSQL, a fresh database per test cloned from a migrated template.

The template is built by running the migrations, exactly as ``hookrelay migrate`` does.

``TEST_DATABASE_URL`` points the suite at a server of yours; without it the
embedded server is started under ``.hookrelay-test/`` (reused across runs).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import os
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store.migrations import migrate
from hookrelay.outbox.store.pool import create_pool
from hookrelay.service.server import embedded, lifecycle
from hookrelay.service.server import event_loop as serving
from hookrelay.service.server.app import create_app
from hookrelay.service.server.prerequisites import Runtime
from hookrelay.service.server.settings import Settings
from tests.harness.procs import COVERAGE_VARIABLES
from tests.receiver import Receiver
from tests.support import (
    ADMIN,
    ADMIN_TOKEN,
    ROOT,
    ServeProcess,
    clone_template,
    dispatcher_env,
    free_port,
    module_serve,
    start,
    wait_for_port,
    with_database,
)

# Every hookrelay process a test starts runs one API process unless the test asks for
# more (tests/test_workers.py does): the suite is about behaviour, not the core count of
# the machine it runs on, and a worker stopped by its supervisor's signal would take
# its coverage data with it.
os.environ.setdefault("HOOKRELAY_WORKERS", "1")


# The modules that take longest under scripts/check (``--durations=0``, summed per
# module), longest first. The parallel workers take whole modules (``--dist loadfile``)
# in collection order, and one long module handed out last would keep the run waiting
# on its worker alone; the rest keep their order.
LONGEST_FIRST = (
    "tests/test_openapi.py",
    "tests/test_migrate.py",
    "tests/test_cli.py",
    "tests/cluster/test_cluster.py",
    "tests/test_packaging.py",
    "tests/test_listen.py",
    "tests/test_upgrade.py",
    "tests/test_portal_browser.py",
    "tests/test_pgbouncer.py",
    "tests/test_ordering.py",
    "tests/test_guard.py",
    "tests/test_schema_compat.py",
    "tests/test_readme.py",
    "tests/test_crash.py",
    "tests/test_lifecycle.py",
    "tests/test_workers.py",
    "tests/test_drivers.py",
    "tests/test_masterkey.py",
    "tests/test_serving.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


@pytest.fixture(scope="module", autouse=True)
def _processes_measured(request: pytest.FixtureRequest) -> Iterator[None]:
    """Coverage measures the hookrelay processes a test starts only in the modules
    marked ``processes``, which exist to cover what runs there alone (the CLI, the
    supervisor, the servers' lifecycle). Elsewhere a child process is the means, not
    the subject, and measuring it cost the suite a tenth of its time. Module-scoped
    and autouse, so it comes before the module's own fixtures start anything."""
    if request.node.get_closest_marker("processes") is not None:
        yield
        return
    saved = {name: os.environ.pop(name) for name in COVERAGE_VARIABLES if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def server_dsn() -> str:
    """DSN of the server's maintenance database."""
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        return url
    data = ROOT / ".hookrelay-test"
    data.mkdir(exist_ok=True)
    # One parallel worker at a time: on a machine that never ran it, the first start
    # creates the server's system user and runs initdb, and two workers doing that at
    # once left one with "could not change permissions of directory" (every test of that
    # worker then errored). The others wait a moment and join the running server.
    with open(data / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        dsn = embedded.start(data)
    asyncio.run(_throwaway(dsn))
    return dsn


async def _throwaway(dsn: str) -> None:
    """The tests' own embedded server keeps nothing worth an fsync.

    Every test drops the database it had, and each DROP DATABASE asks for a checkpoint:
    with fsync on, one of those under the suite's load flushed for seconds while every
    commit waited behind it. Off for this server alone (ALTER SYSTEM, in its data
    directory): commits still reach the operating system, so a killed PostgreSQL
    process loses nothing, as the crash tests need; only a power cut would. A server of
    yours (``TEST_DATABASE_URL``) is left as it is.
    """
    conn = await asyncpg.connect(dsn)
    try:
        if await conn.fetchval("SHOW fsync") == "on":
            await conn.execute("ALTER SYSTEM SET fsync = off")
            await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


async def drop_database(server_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(server_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def template_db(server_dsn: str) -> Iterator[str]:
    name = f"hookrelay_tpl_{uuid.uuid4().hex[:10]}"

    async def create() -> None:
        conn = await asyncpg.connect(server_dsn)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        conn = await asyncpg.connect(with_database(server_dsn, name))
        try:
            await migrate(conn)
        finally:
            await conn.close()

    asyncio.run(create())
    yield name
    asyncio.run(drop_database(server_dsn, name))


@pytest.fixture(scope="session")
def dropper(server_dsn: str) -> Iterator[Callable[[str], None]]:
    """Drops the tests' databases in a thread of its own, while the next tests run.

    DROP DATABASE waits for a checkpoint, seconds on a busy server; no test needs to
    wait for the previous one's database to be gone. All are gone when the session ends.
    Several at once: concurrent drops wait for the same checkpoint, so they keep up.
    """
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="dropdb") as pool:
        pending: list[Future[None]] = []

        def drop(name: str) -> None:
            pending.append(pool.submit(lambda: asyncio.run(drop_database(server_dsn, name))))

        yield drop
        for dropped in pending:
            dropped.result()  # a failed drop fails the session


@pytest.fixture
async def dsn(
    server_dsn: str, template_db: str, dropper: Callable[[str], None]
) -> AsyncIterator[str]:
    """A fresh, migrated database for this test alone."""
    name = await clone_template(server_dsn, template_db)
    yield with_database(server_dsn, name)
    dropper(name)


@pytest.fixture(scope="module")
def module_dsn(server_dsn: str, template_db: str, dropper: Callable[[str], None]) -> Iterator[str]:
    """A fresh, migrated database shared by the tests of one module."""
    name = asyncio.run(clone_template(server_dsn, template_db))
    yield with_database(server_dsn, name)
    dropper(name)


@pytest.fixture(scope="module")
def hookrelay_serve(
    module_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    """One ``hookrelay serve`` for the module (fast retries, loopback callbacks allowed);
    each test makes its own tenant (``hookrelay_serve.tenant()``)."""
    yield from module_serve(module_dsn, tmp_path_factory, streams_per_tenant="4")


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(dsn, min_size=1, max_size=30)
    yield p
    await p.close()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path,
        admin_token=ADMIN_TOKEN,
        allow_private_cidrs="127.0.0.0/8,::1/128",
        allow_http=True,
        retry_base_s=0.05,
        retry_cap_s=0.2,
        max_attempts=3,
        lease_s=5.0,
        http_timeout_s=2.0,
        connect_timeout_s=1.0,
        poll_interval_s=0.05,
        sweep_interval_s=0.1,
        # Tests that want the circuit breaker lower this; elsewhere a failing
        # receiver should exhaust attempts, not open the circuit.
        breaker_threshold=10_000,
        breaker_probe_s=0.3,
    )


@pytest.fixture
def runtime(settings: Settings, dsn: str) -> Runtime:
    key = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
    return Runtime(
        settings=replace(settings, master_key=key),
        dsn=dsn,
        admin_token=ADMIN_TOKEN,
        secret_box=SecretBox(base64.urlsafe_b64decode(key)),
        admin_token_created=False,
        embedded=False,
    )


@pytest.fixture
async def client(runtime: Runtime, pool: asyncpg.Pool) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(runtime, pool=pool)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hookrelay.test") as c:
            yield c


@dataclass(frozen=True)
class Served:
    """An app served over real sockets: its base URL and the app (for its state)."""

    url: str
    app: Any

    @property
    def ws(self) -> str:
        return self.url.replace("http://", "ws://", 1) + "/v1/ws"


@pytest.fixture
def serve_app(
    runtime: Runtime, pool: asyncpg.Pool
) -> Callable[..., contextlib.AbstractAsyncContextManager[Served]]:
    """Serves the app over real sockets in the test's own loop (WebSockets, streams).

    ``async with serve_app(ws_ping_s=0.2) as served:`` with settings overrides by name.
    """

    @contextlib.asynccontextmanager
    async def served(**overrides: Any) -> AsyncIterator[Served]:
        settings = replace(runtime.settings, **overrides)
        app = create_app(replace(runtime, settings=settings), pool=pool)
        sock = lifecycle.bind("127.0.0.1", 0)
        port = sock.getsockname()[1]
        listening = asyncio.Event()
        config = serving.uvicorn_config(
            app,
            host="127.0.0.1",
            port=port,
            graceful_s=2,
            limits=serving.ConnectionLimits(ws_ping_s=settings.ws_ping_s),
        )
        server = lifecycle.Server(config, on_listening=listening.set)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            started = asyncio.ensure_future(listening.wait())
            await asyncio.wait((started, task), timeout=30, return_when=asyncio.FIRST_COMPLETED)
            assert listening.is_set(), "the app did not start"
            yield Served(f"http://127.0.0.1:{port}", app)
        finally:
            server.stop()
            await task
            sock.close()

    return served


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A real webhook receiver on 127.0.0.1 answering 204 (set ``behaviour`` to change)."""
    rx = await Receiver().start()
    yield rx
    await rx.stop()


@pytest.fixture
async def tenant(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return dict(r.json())


@pytest.fixture
async def other_tenant(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.post("/v1/admin/tenants", json={"name": "globex"}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return dict(r.json())


@pytest.fixture
async def live_api(runtime: Runtime, dsn: str) -> AsyncIterator[tuple[str, str]]:
    """``hookrelay api`` in its own process on a free port, with a tenant; yields (url, key)."""
    port = free_port()
    proc = await start("api", dispatcher_env(runtime, dsn, port=str(port), host="127.0.0.1"))
    try:
        await wait_for_port(port, proc)
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=url) as c:
            r = await c.post("/v1/admin/tenants", json={"name": "fuzz"}, headers=ADMIN)
        yield url, r.json()["apiKey"]
    finally:
        proc.terminate()
        await proc.wait()


NewDb = Callable[[], Awaitable[str]]


@pytest.fixture
async def new_db(server_dsn: str) -> AsyncIterator[NewDb]:
    """Empty databases (not from the template), dropped after the test."""
    names: list[str] = []

    async def make() -> str:
        name = f"hookrelay_m_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(server_dsn)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        names.append(name)
        return with_database(server_dsn, name)

    yield make
    conn = await asyncpg.connect(server_dsn)
    try:
        for name in names:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
