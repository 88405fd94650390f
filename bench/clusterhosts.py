"""A hookrelay deployment on one machine: PostgreSQL, receiver and app hosts as namespaces.

``Cluster`` builds the hosts of :mod:`bench.netns`: ``pg0`` (and ``pg1``, a streaming
standby, when asked) on the database network, ``rx`` (the receiver) on the edge network,
and ``h1``..``hN`` on both, each running ``hookrelay api`` and ``hookrelay dispatch``
against ``DATABASE_URL`` over the database network. The benchmark or test drives it from
the machine's own namespace, the control host on both networks.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench.backlog import fill
from bench.netns import Host, Network
from bench.pgnodes import PORT, PgNode, cpu_seconds
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store.pool import apply_schema
from tests.harness.procs import ROOT, hookrelay, master_key, service_env
from tests.harness.waiting import eventually

RX_PORT = 9000
API_PORT = 8000
ADMIN_TOKEN = "cluster-admin"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
ALLOWED = "198.18.0.0/15"  # both cluster networks, and nothing else


async def poll(predicate: Any, timeout: float, what: str, every: float = 0.05) -> Any:
    """``common.eventually`` at the cluster's pace: a predicate that asks a host is costly."""
    return await eventually(predicate, timeout, what=what, every=every)


def process_cpu_s(pid: int) -> float:
    """utime + stime of one process, in seconds (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Proc:
    """One hookrelay process on a host, its stdout and stderr kept in files."""

    role: str
    popen: subprocess.Popen[bytes]
    out: Path
    err: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def cpu_s(self) -> float:
        return process_cpu_s(self.popen.pid)

    def owner(self) -> str | None:
        """The dispatcher's lease owner, from its start banner."""
        for line in self.out.read_text().splitlines():
            if line.startswith("hookrelay dispatcher ") and line.endswith(" started"):
                return line.split()[2]
        return None

    def counters(self) -> Counter[str]:
        """The counters a dispatcher logs when it stops (empty if it never did)."""
        for line in self.err.read_text().splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("msg") == "dispatcher stopped":
                    return Counter(entry.get("counters", {}))
        return Counter()


@dataclass
class AppHost:
    """``h1``..``hN``: where ``hookrelay api`` and ``hookrelay dispatch`` run."""

    host: Host
    procs: dict[str, Proc] = field(default_factory=dict)
    stopped: list[Proc] = field(default_factory=list)  # earlier lives, for their counters

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def api(self) -> str:
        return f"http://{self.host.address('edge')}:{API_PORT}"

    def owner(self) -> str | None:
        proc = self.procs.get("dispatch")
        return proc.owner() if proc else None

    def counters(self) -> Counter[str]:
        """Every life's dispatcher counters added up."""
        total: Counter[str] = Counter()
        for proc in self.stopped:
            if proc.role == "dispatch":
                total += proc.counters()
        return total


@dataclass
class Database:
    """One database of the cluster, and its DSN (every server listed; the hosts' and ours)."""

    name: str
    dsn: str


class Cluster:
    """The hosts; ``await start()``, then ``close()`` (in a ``finally``)."""

    def __init__(
        self, net: Network, *, apps: int = 3, standby: str | None = None, rx_delay_s: float = 0.0
    ) -> None:
        """``standby``: None, ``"sync"`` or ``"async"`` (a second server streaming from pg0)."""
        self.net, self.standby, self.rx_delay_s = net, standby, rx_delay_s
        self.key = master_key()
        self.box = SecretBox(base64.urlsafe_b64decode(self.key))
        self.tmp = Path(tempfile.mkdtemp(prefix="cluster-"))
        self.pg = [PgNode(net, net.add_host("pg0", 10, ["db"]))]
        if standby:
            self.pg.append(PgNode(net, net.add_host("pg1", 11, ["db"])))
        self.rx = net.add_host("rx", 20, ["edge"])
        self.apps = [
            AppHost(net.add_host(f"h{i}", 30 + i, ["db", "edge"])) for i in range(1, apps + 1)
        ]
        self.rx_proc: subprocess.Popen[bytes] | None = None
        self.http = httpx.AsyncClient(timeout=10)

    # ------------------------------------------------------------ databases

    async def start(self) -> Cluster:
        primary = self.pg[0]
        primary.init_primary()
        # Only pg0 waits for a synchronous standby: set on the command line, not in the
        # data directory, so the standby's copy does not have it and, once promoted,
        # does not wait for a standby it no longer has.
        primary.start(**({"synchronous_standby_names": "*"} if self.standby == "sync" else {}))
        if self.standby:
            self.pg[1].init_standby(primary)
            self.pg[1].start()
            await primary.wait_streaming(sync=self.standby == "sync")
        self.start_receiver()
        return self

    def dsn(self, database: str) -> str:
        """``database`` on the writable server: every server listed, read-write wanted."""
        hosts = ",".join(f"{n.address}:{PORT}" for n in self.pg)
        attrs = "?target_session_attrs=read-write" if len(self.pg) > 1 else ""
        return f"postgresql://postgres@{hosts}/{database}{attrs}"

    async def create_database(self, name: str) -> Database:
        conn = await asyncpg.connect(self.dsn("postgres"))
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        db = Database(name, self.dsn(name))
        conn = await asyncpg.connect(db.dsn)
        try:
            await apply_schema(conn)
        finally:
            await conn.close()
        return db

    async def fill(self, db: Database, events: int) -> None:
        """``events`` succeeded tasks whose events wait in the outbox, for the receiver."""
        await fill(db.dsn, self.box, self.rx_url, events)
        conn = await asyncpg.connect(db.dsn)
        try:
            # bench.backlog writes rows for a loopback receiver; these go to rx.
            await conn.execute("UPDATE outbox SET host = $1", self.rx.address("edge"))
            await conn.execute("VACUUM ANALYZE outbox")
        finally:
            await conn.close()

    def pg_cpu_s(self) -> float:
        return sum(cpu_seconds(n.host.ns) for n in self.pg)

    # ------------------------------------------------------------- receiver

    @property
    def rx_url(self) -> str:
        return f"http://{self.rx.address('edge')}:{RX_PORT}/hook"

    def start_receiver(self, delay_s: float | None = None) -> None:
        if delay_s is not None:
            self.rx_delay_s = delay_s
        argv = [
            *self.net.argv(self.rx, [sys.executable]),
            "-m", "bench._cluster_receiver", "0.0.0.0", str(RX_PORT),
            "--delay-s", str(self.rx_delay_s),
        ]  # fmt: skip
        self.rx_proc = subprocess.Popen(argv, cwd=ROOT)

    async def restart_receiver(self, delay_s: float | None = None) -> None:
        """A fresh receiver (its counts start from zero), answering after ``delay_s``."""
        if self.rx_proc is not None:
            self.rx_proc.terminate()
            self.rx_proc.wait(30)
            self.rx_proc = None
        self.start_receiver(delay_s)
        await self.rx_stats()

    async def rx_stats(self, *, ids: bool = False) -> dict[str, Any]:
        url = f"http://{self.rx.address('edge')}:{RX_PORT}/{'ids' if ids else 'stats'}"

        async def answer() -> dict[str, Any] | None:
            try:
                return dict((await self.http.get(url)).json())
            except httpx.TransportError:
                return None

        stats: dict[str, Any] = await poll(answer, 30, "the receiver answers")
        return stats

    async def delivered_by(self, app: AppHost) -> int:
        """Requests the receiver has had from ``app``'s address."""
        return int((await self.rx_stats())["by_source"].get(app.host.address("edge"), 0))

    # ------------------------------------------------------------ app hosts

    def env(self, db: Database, **settings: object) -> dict[str, str]:
        base: dict[str, object] = {
            "allow_private_cidrs": ALLOWED,
            "log_level": "INFO",
            "concurrency": 200,
            "per_host_concurrency": 200,
            "batch_size": 500,
            # One API process per host: the hosts share this machine's two cores, and a
            # scenario is about hosts, not about the worker processes within one.
            "workers": 1,
        }
        return service_env(db.dsn, self.key, admin_token=ADMIN_TOKEN, **{**base, **settings})

    def start_app(
        self,
        app: AppHost,
        db: Database,
        settings: dict[str, object] | None = None,
        *,
        roles: tuple[str, ...] = ("api", "dispatch"),
    ) -> None:
        """Start ``roles`` on ``app`` (``hookrelay api`` on the host's addresses, port 8000)."""
        env = self.env(db, **(settings or {}))
        for role in roles:
            argv = hookrelay(role)
            if role == "api":
                argv += ["--host", "0.0.0.0", "--port", str(API_PORT)]
            out = self.tmp / f"{app.name}-{role}-{time.monotonic_ns()}.out"
            err = out.with_suffix(".err")
            with out.open("wb") as stdout, err.open("wb") as stderr:  # the child keeps its own
                popen = subprocess.Popen(
                    self.net.argv(app.host, argv),
                    env={**env, **({"HOOKRELAY_LOG_LEVEL": "WARNING"} if role == "api" else {})},
                    cwd=ROOT,
                    stdout=stdout,
                    stderr=stderr,
                )
            app.procs[role] = Proc(role, popen, out, err)

    async def wait_started(self, app: AppHost, timeout: float = 60) -> None:
        """Until ``app``'s API answers /readyz 200 and its dispatcher has printed its banner."""

        async def up() -> bool:
            for proc in app.procs.values():
                if not proc.alive():
                    raise AssertionError(
                        f"{app.name} {proc.role} exited {proc.popen.returncode}: "
                        f"{proc.err.read_text()[-2000:]}"
                    )
            if "dispatch" in app.procs and app.procs["dispatch"].owner() is None:
                return False
            if "api" in app.procs:
                return await self.ready(app) == 200
            return True

        await poll(up, timeout, f"{app.name} started", every=0.1)

    async def ready(self, app: AppHost) -> int:
        """``app``'s /readyz status, 0 if nothing answers."""
        try:
            return (await self.http.get(f"{app.api}/readyz", timeout=5)).status_code
        except httpx.TransportError:
            return 0

    def stop_app(self, app: AppHost, timeout: float = 60) -> None:
        """SIGTERM every process of ``app`` and wait; their counters stay readable."""
        for proc in app.procs.values():
            if proc.alive():
                proc.popen.send_signal(signal.SIGTERM)
        for proc in app.procs.values():
            proc.popen.wait(timeout)
        app.stopped += app.procs.values()
        app.procs = {}

    def kill_app(self, app: AppHost) -> int:
        """SIGKILL every process in ``app``'s namespace (the host is lost); how many."""
        n = self.net.kill_host(app.host)
        for proc in app.procs.values():
            proc.popen.wait(30)
        app.stopped += app.procs.values()
        app.procs = {}
        return n

    async def close(self) -> None:
        """Kill every process of the cluster, reap them, remove the servers' files."""
        await self.http.aclose()
        self.net.close()
        popens = [p.popen for app in self.apps for p in [*app.procs.values(), *app.stopped]]
        popens += [n.proc for n in self.pg if n.proc is not None]
        if self.rx_proc is not None:
            popens.append(self.rx_proc)
        for popen in popens:
            popen.wait(30)
        for node in self.pg:
            node.remove()
        shutil.rmtree(self.tmp, ignore_errors=True)  # the processes' logs, read by now


@contextlib.asynccontextmanager
async def cluster(**kwargs: Any) -> Any:
    """A started :class:`Cluster` on a network of its own, removed however the block ends."""
    net = Network().open()
    c: Cluster | None = None
    try:
        c = Cluster(net, **kwargs)
        yield await c.start()
    finally:
        if c is not None:
            await c.close()
        else:
            net.close()
