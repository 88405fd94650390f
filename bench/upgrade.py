"""Rolling upgrade under load: the previous release beside this one, on one database.

The previous release (``--from``, default a62dbb1, which reports 0.1.0) is installed
from this repository's history into a venv of its own: a git worktree of that commit,
``python -m venv`` and ``pip install`` of the worktree (nothing is fetched but
packages from the registry pip is configured with), cached under
``.hookrelay-bench/releases/`` (``--cache``). Then, on one PostgreSQL (DATABASE_URL,
else the embedded one), in the order an operator would:

1. the previous release migrates a new database; its ``api`` and ``dispatch`` run;
2. ``hookrelay migrate`` of this release (the one step that needs DDL rights);
3. this release's ``api`` and ``dispatch`` start, with ``HOOKRELAY_MIGRATE=off``;
4. the previous API leaves the rotation (as a load balancer drains it) and,
   ``--drain-s`` later, the previous ``api`` and ``dispatch`` get SIGTERM;
5. with ``--rollback``: the previous release starts again on the migrated schema,
   and this release's processes leave the same way.

Each phase lasts ``--phase-s``. Throughout, ``--rate`` tasks a second are submitted
and, ``--hold-s`` later, completed, through the APIs in the rotation round-robin: a
task is submitted and completed through one API and long-polled (``?wait=20``, every
``--long-poll-every``-th task) through the next, so a long poll on one release is
woken by a completion through the other. ``--sse`` tenant streams
(``GET /v1/events``) are open on each API from its start, and move to another API,
resuming from ``Last-Event-ID``, when theirs stops. A receiver (bench/_receiver.py)
answers every webhook 204.

Reported: requests sent, 2xx, and anything else by status and by the release that
answered; webhooks completed, delivered, lost and duplicated; the longest time from
a completion's commit (its ``completedAt``) to an SSE client or a long poll seeing
it, by the release that served the client; complete→receipt per phase. Targets: 0
lost, 0 duplicates, 0 non-2xx, nothing seen later than 1 s. ``--json FILE`` writes
the figures (tests/test_upgrade.py runs a short form).

    python -m bench upgrade [--from REF] [--rate 100] [--phase-s 20] [--sse 2]
                            [--long-poll-every 2] [--rollback] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import psutil

from bench.common import (
    RELIABILITY,
    RELIABILITY_HEADER,
    ReceiverProcess,
    fresh_database,
    percentile,
    record,
    server_dsn,
    server_facts,
)
from bench.sched import own_cpu_s
from hookrelay.service.api.release import release
from tests.harness.procs import ROOT, free_port, master_key, service_env, wait_for_port
from tests.harness.releases import PREVIOUS, previous_release, run

TARGET_S = 1.0  # no stream or long poll sees a change later than this
LONG_POLL_WAIT_S = 20
LAG_TICK_S = 0.05
KEEPALIVE_S = 2.0  # the clients' idle keep-alive, under the server's 5 s
DRAIN_S = 2.0  # from leaving the rotation to SIGTERM (--drain-s)
TERMINAL = {"succeeded", "failed", "canceled", "timed_out"}
ADMIN_TOKEN = "bench"


@dataclass(frozen=True)
class Release:
    """How to run one release's ``hookrelay``."""

    version: str
    label: str  # as the report names it
    argv: tuple[str, ...]
    cwd: Path
    strip_env: tuple[str, ...] = ()

    @classmethod
    def previous(cls, venv: Path, ref: str) -> Release:
        hookrelay = venv / "bin" / "hookrelay"
        # Never this tree's modules: no PYTHONPATH, no coverage hooks, its own cwd.
        strip = ("PYTHONPATH", "COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")
        env = {k: v for k, v in os.environ.items() if k not in strip}
        out = run([str(hookrelay), "--version"], "hookrelay --version", env=env)
        version = out.split()[-1]
        return cls(version, f"{version} ({ref})", (str(hookrelay),), venv.parent, strip)

    @classmethod
    def current(cls) -> Release:
        version = release()
        argv = (sys.executable, "-m", "hookrelay.service.cli")
        return cls(version, f"{version} (this tree)", argv, ROOT)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in base.items() if k not in self.strip_env}


@dataclass(eq=False)
class Proc:
    """One hookrelay process, its output in a log file."""

    release: Release
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    started: float = field(default_factory=time.monotonic)
    cpu_share: float = float("nan")  # of one core, over its life; set as it is stopped

    @classmethod
    def start(cls, release: Release, command: str, env: dict[str, str], logs: Path) -> Proc:
        log = logs / f"{command}-{release.version}-{time.monotonic_ns()}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*release.argv, command],
                env=release.env(env),
                cwd=release.cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return cls(release, command, proc, log)

    async def stop(self) -> int:
        """SIGTERM, then wait for it to exit; its exit status."""
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, psutil.Error):
                alive = time.monotonic() - self.started
                self.cpu_share = tree_cpu_s(self.proc.pid) / alive
            self.proc.terminate()
        try:
            return await asyncio.to_thread(self.proc.wait, 60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait, 10)
            return -9


@dataclass(eq=False)
class Api:
    release: Release
    proc: Proc
    url: str


@dataclass(eq=False)
class Stream:
    """One SSE client of ``GET /v1/events``, moved to another API when its own stops."""

    name: str
    api: Api
    opened: float = 0.0  # when its first stream answered
    last_id: str | None = None
    seen: dict[str, tuple[float, str]] = field(default_factory=dict)  # task -> (at, label)
    reconnects: int = 0


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and of every process under it (an API's workers)."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def status(code: int, body: bytes) -> str:
    """The status as the report shows it: with the error's code unless it is a 2xx."""
    if code < 300 or code == 304:
        return str(code)
    try:
        return f"{code} {json.loads(body)['error']['code']}"
    except (ValueError, KeyError, TypeError):
        return str(code)


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class Load:
    """Tasks submitted and completed at a steady rate through the APIs in rotation, long
    polls on them, SSE streams on each API; everything it saw, with when and where."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        streams: aiohttp.ClientSession,
        api_key: str,
        callback: str,
        *,
        rate: float,
        hold_s: float,
        long_poll_every: int,
    ) -> None:
        self.http, self.streams_http, self.callback = http, streams, callback
        self.tenant = {"Authorization": f"Bearer {api_key}"}
        self.admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        self.rate, self.hold_s, self.long_poll_every = rate, hold_s, long_poll_every
        self.rotation: list[Api] = []
        self.requests: Counter[tuple[str, str, str]] = Counter()  # (label, kind, status)
        self.completed: dict[str, float] = {}  # task id -> completedAt (epoch s)
        self.long_polls: dict[str, tuple[float, str] | None] = {}  # task -> (seen at, label)
        self.streams: list[Stream] = []
        self.failures: list[str] = []  # the first few failed requests, for the log
        self.lag: list[tuple[float, float]] = []  # see watch_lag
        self._stop = asyncio.Event()
        self._closing = asyncio.Event()
        self._work: set[asyncio.Task[None]] = set()
        self._clients: set[asyncio.Task[None]] = set()

    def _failed(self, label: str, kind: str, exc: Exception) -> None:
        self.requests[(label, kind, type(exc).__name__)] += 1
        if len(self.failures) < 10:
            self.failures.append(f"{kind} to {label}: {type(exc).__name__}: {exc}")

    def _spawn(self, into: set[asyncio.Task[None]], coro: Any) -> None:
        task = asyncio.create_task(coro)
        into.add(task)
        task.add_done_callback(into.discard)

    async def _call(
        self, kind: str, i: int, method: str, path: str, headers: dict[str, str], body: Any
    ) -> tuple[int, bytes, Mapping[str, str]] | None:
        """One request through the rotation's API ``i``; a connection error is retried
        through the next (the request is idempotent: the same key, or a completion)."""
        for attempt in range(6):
            api = self.rotation[(i + attempt) % len(self.rotation)]
            try:
                async with self.http.request(
                    method, api.url + path, headers=headers, json=body
                ) as r:
                    data = await r.read()
                    self.requests[(api.release.label, kind, status(r.status, data))] += 1
                    return r.status, data, r.headers.copy()
            except (aiohttp.ClientError, TimeoutError) as exc:
                self._failed(api.release.label, kind, exc)
                await asyncio.sleep(0.05)
        return None

    async def _task(self, i: int) -> None:
        submitted = await self._call(
            "submit",
            i,
            "POST",
            "/v1/tasks",
            {**self.tenant, "Idempotency-Key": f"upgrade-{i}"},
            {"type": "upgrade", "callbackUrl": self.callback, "input": {"i": i}},
        )
        if submitted is None or submitted[0] != 202:
            return
        task_id = json.loads(submitted[1])["id"]
        if i % self.long_poll_every == 0:
            self.long_polls[task_id] = None
            self._spawn(self._clients, self._long_poll(i + 1, task_id, submitted[2]["ETag"]))
        await asyncio.sleep(self.hold_s)
        done = await self._call(
            "complete",
            i,
            "POST",
            f"/v1/tasks/{task_id}/complete",
            self.admin,
            {"status": "succeeded", "result": {"i": i}},
        )
        if done is not None and done[0] == 200:
            self.completed[task_id] = epoch(json.loads(done[1])["completedAt"])

    async def _long_poll(self, i: int, task_id: str, etag: str) -> None:
        """Through the rotation's API ``i`` (the next one after the task's own), until
        the task is seen terminal; asked again wherever it ends (a wait that ran out,
        an API shutting down)."""
        while not self._closing.is_set():
            api = self.rotation[i % len(self.rotation)]
            label = api.release.label
            try:
                async with self.streams_http.get(
                    f"{api.url}/v1/tasks/{task_id}?wait={LONG_POLL_WAIT_S}",
                    headers={**self.tenant, "If-None-Match": etag},
                ) as r:
                    data = await r.read()
                    self.requests[(label, "long poll", status(r.status, data))] += 1
                    if r.status == 200:
                        etag = r.headers["ETag"]
                        if json.loads(data)["status"] in TERMINAL:
                            self.long_polls[task_id] = (time.time(), label)
                            return
                    elif r.status != 304:
                        await asyncio.sleep(0.1)
            except (aiohttp.ClientError, TimeoutError) as exc:
                self._failed(label, "long poll", exc)
                await asyncio.sleep(0.05)

    def open_streams(self, api: Api, n: int) -> None:
        for _ in range(n):
            stream = Stream(f"sse{len(self.streams)}", api)
            self.streams.append(stream)
            self._spawn(self._clients, self._stream(stream))

    async def _stream(self, s: Stream) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        while not self._closing.is_set():
            if s.api not in self.rotation:  # its API left: resume on another
                s.api = self.rotation[len(self.streams) % len(self.rotation)]
            label = s.api.release.label
            headers = {**self.tenant, "Accept": "text/event-stream"}
            if s.last_id is not None:
                headers["Last-Event-ID"] = s.last_id
            try:
                async with self.streams_http.get(
                    s.api.url + "/v1/events", headers=headers, timeout=timeout
                ) as r:
                    if r.status != 200:
                        code = status(r.status, await r.read())
                        self.requests[(label, "sse", code)] += 1
                        await asyncio.sleep(0.2)
                        continue
                    self.requests[(label, "sse", "200")] += 1
                    event_id: str | None = None
                    data: bytes | None = None
                    async for raw in r.content:
                        line = raw.rstrip(b"\r\n")
                        if line.startswith(b"id:"):
                            event_id = line[3:].strip().decode()
                        elif line.startswith(b"data:"):
                            data = line[5:]
                        elif not line:  # the end of a frame: it counts only whole
                            now = time.time()
                            s.opened = s.opened or now
                            if event_id is not None:
                                s.last_id = event_id
                            if data is not None:
                                task = json.loads(data)
                                if task.get("status") in TERMINAL:
                                    s.seen.setdefault(task["id"], (now, label))
                            event_id, data = None, None
            except (aiohttp.ClientError, TimeoutError) as exc:
                self._failed(label, "sse", exc)
                await asyncio.sleep(0.05)
            s.reconnects += 1

    async def run(self) -> None:
        """Start a task every 1/rate s until :meth:`stop`; then wait for those started."""
        start = time.monotonic()
        for i in itertools.count():
            delay = start + i / self.rate - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
            if self._stop.is_set():
                break
            self._spawn(self._work, self._task(i))
        while self._work:
            await asyncio.gather(*list(self._work))

    def stop(self) -> None:
        self._stop.set()

    async def watch_lag(self) -> None:
        """How late this process's own event loop runs (every client here shares it):
        (epoch s, seconds late) of each tick, to tell a starved benchmark from a late
        server."""
        while not self._closing.is_set():
            before = time.monotonic()
            await asyncio.sleep(LAG_TICK_S)
            self.lag.append((time.time(), time.monotonic() - before - LAG_TICK_S))

    def caught_up(self) -> bool:
        """Every long poll answered, every stream saw every completion after it opened."""
        if any(seen is None for t, seen in self.long_polls.items() if t in self.completed):
            return False
        for s in self.streams:
            if any(t not in s.seen for t, at in self.completed.items() if at > s.opened):
                return False
        return True

    async def close(self) -> None:
        self._closing.set()
        for task in list(self._clients):
            task.cancel()
        await asyncio.gather(*list(self._clients), return_exceptions=True)


@dataclass
class Phase:
    name: str
    start: float  # epoch s
    end: float = float("inf")


def phase_of(phases: list[Phase], at: float) -> Phase | None:
    return next((p for p in phases if p.start <= at < p.end), None)


def lateness(
    load: Load,
) -> tuple[list[tuple[str, str, float, float]], int, int]:
    """(kind, label, completedAt, seconds late) of every sighting; SSE and long-poll misses."""
    out: list[tuple[str, str, float, float]] = []
    missed_sse = missed_lp = 0
    for s in load.streams:
        for task_id, at in load.completed.items():
            if at <= s.opened:
                continue
            if task_id in s.seen:
                seen, label = s.seen[task_id]
                out.append(("sse", label, at, max(0.0, seen - at)))
            else:
                missed_sse += 1
    for task_id, seen_lp in load.long_polls.items():
        if task_id not in load.completed:
            continue
        if seen_lp is None:
            missed_lp += 1
        else:
            at = load.completed[task_id]
            out.append(("long poll", seen_lp[1], at, max(0.0, seen_lp[0] - at)))
    return out, missed_sse, missed_lp


def worst(values: Iterable[float]) -> float:
    return max(values, default=float("nan"))


def ms(value: float) -> str:
    return "–" if value != value else f"{value * 1000:,.0f}"


async def delivered(dsn: str, task_ids: list[str], timeout: float) -> list[str]:
    """The event ids of ``task_ids``, once each is delivered (or ``timeout`` passed)."""
    conn = await asyncpg.connect(dsn)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = await conn.fetchval(
                "SELECT count(*) FROM tasks WHERE id = ANY($1::text[]) "
                "AND delivery_status = 'delivered'",
                task_ids,
            )
            if done >= len(task_ids):
                break
            await asyncio.sleep(0.5)
        rows = await conn.fetch("SELECT event_id FROM tasks WHERE id = ANY($1::text[])", task_ids)
        return [r[0] for r in rows if r[0] is not None]
    finally:
        await conn.close()


async def applied(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT version, name FROM schema_version ORDER BY version")
    finally:
        await conn.close()
    return [f"{r[0]:04d}_{r[1]}" for r in rows]


async def start_pair(release: Release, env: dict[str, str], logs: Path) -> tuple[Api, Proc]:
    """``api`` and ``dispatch`` of ``release``; the API once it listens."""
    port = free_port()
    api_env = {**env, "HOOKRELAY_HOST": "127.0.0.1", "HOOKRELAY_PORT": str(port)}
    api = Proc.start(release, "api", api_env, logs)
    dispatch = Proc.start(release, "dispatch", env, logs)
    try:
        await asyncio.to_thread(wait_for_port, port, api.proc, 60)
    except RuntimeError as exc:
        raise RuntimeError(f"{release.label} api did not start ({exc}); see {api.log}") from exc
    return Api(release, api, f"http://127.0.0.1:{port}"), dispatch


async def scenario(args: argparse.Namespace) -> dict[str, Any]:
    cache = Path(args.cache) if args.cache else None
    print(f"installing {args.from_ref} (cached under {cache or ROOT / '.hookrelay-bench'})")
    venv = await asyncio.to_thread(previous_release, args.from_ref, cache)
    old, new = Release.previous(venv, args.from_ref), Release.current()
    server = server_dsn()
    dsn = await fresh_database(server, migrated=False)
    work = Path(tempfile.mkdtemp(prefix="hookrelay-upgrade-"))
    env = service_env(dsn, master_key(), admin_token=ADMIN_TOKEN, data_dir=str(work))
    run([*old.argv, "migrate"], f"{old.label} migrate", env=old.env(env), cwd=old.cwd)
    print(f"{old.label} migrated a new database up to {(await applied(dsn))[-1]}")
    rx = ReceiverProcess("--commit-times")
    procs: list[Proc] = []
    phases: list[Phase] = []
    exits: dict[str, int] = {}
    t0 = time.time()
    bench_cpu0, bench_t0 = own_cpu_s(), time.monotonic()

    def begin(name: str) -> None:
        now = time.time()
        if phases:
            phases[-1].end = now
        phases.append(Phase(name, now))
        print(f"[{now - t0:5.1f} s] {name}", flush=True)

    async def leave(api: Api, dispatch: Proc) -> None:
        # Out of the load balancer first; SIGTERM once requests already on their way
        # have arrived (a balancer's deregistration delay). SIGTERM then answers what is
        # in flight, long polls included, and ends the streams, which resume elsewhere.
        load.rotation.remove(api)
        await asyncio.sleep(args.drain_s)
        codes = await asyncio.gather(api.proc.stop(), dispatch.stop())
        for proc, code in zip((api.proc, dispatch), codes, strict=True):
            name = f"{proc.release.label} {proc.name}"
            exits[name if name not in exits else f"{name} (again)"] = code

    # As many connections as a busy client would open (past that, requests queue here);
    # streams and long polls hold theirs for long, on a session of their own. An idle
    # connection is dropped before the server's keep-alive (5 s) would close it under a
    # request just sent, as a well-behaved client does.
    connector = aiohttp.TCPConnector(limit=500, keepalive_timeout=KEEPALIVE_S)
    long_held = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
    timeout = aiohttp.ClientTimeout(total=LONG_POLL_WAIT_S + 30)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout) as http,
        aiohttp.ClientSession(connector=long_held) as streams,
    ):
        try:
            old_api, old_dispatch = await start_pair(old, env, work)
            procs += [old_api.proc, old_dispatch]
            async with http.post(
                old_api.url + "/v1/admin/tenants",
                json={"name": "upgrade"},
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            ) as r:
                r.raise_for_status()
                api_key = (await r.json())["apiKey"]
            load = Load(
                http,
                streams,
                api_key,
                rx.url,
                rate=args.rate,
                hold_s=args.hold_s,
                long_poll_every=args.long_poll_every,
            )
            load.rotation.append(old_api)
            load.open_streams(old_api, args.sse)
            load._spawn(load._clients, load.watch_lag())
            running = asyncio.create_task(load.run())
            begin(f"{old.version} only")
            await asyncio.sleep(args.phase_s)

            # The phase starts as the migration does: old processes meet the new schema
            # from the moment it commits.
            begin(f"migrated by {new.version}, {old.version} only")
            before = await applied(dsn)
            migrate = await asyncio.create_subprocess_exec(
                *new.argv, "migrate", env=new.env(env), cwd=new.cwd,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            out, _ = await migrate.communicate()
            if migrate.returncode != 0:
                raise RuntimeError(f"{new.label} migrate failed: {out.decode()}")
            migrations = [m for m in await applied(dsn) if m not in before]
            print(f"  {new.label} migrate applied {', '.join(migrations) or 'nothing'}")
            await asyncio.sleep(args.phase_s)

            new_env = {**env, "HOOKRELAY_MIGRATE": "off"}
            new_api, new_dispatch = await start_pair(new, new_env, work)
            procs += [new_api.proc, new_dispatch]
            load.open_streams(new_api, args.sse)
            load.rotation.append(new_api)
            begin(f"{old.version} + {new.version}")
            await asyncio.sleep(args.phase_s)

            await leave(old_api, old_dispatch)
            begin(f"{new.version} only")
            await asyncio.sleep(args.phase_s)

            if args.rollback:
                back_api, back_dispatch = await start_pair(old, env, work)
                procs += [back_api.proc, back_dispatch]
                load.open_streams(back_api, args.sse)
                load.rotation.append(back_api)
                begin(f"rollback: {new.version} + {old.version}")
                await asyncio.sleep(args.phase_s)
                await leave(new_api, new_dispatch)
                begin(f"rolled back, {old.version} only on the migrated schema")
                await asyncio.sleep(args.phase_s)

            load.stop()
            await running
            phases[-1].end = time.time()
            print(f"[{time.time() - t0:5.1f} s] load stopped; waiting for deliveries")
            events = await delivered(dsn, list(load.completed), 120)
            deadline = time.monotonic() + 10  # the last completions reach every client
            while not load.caught_up() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await load.close()
            for failure in load.failures:
                print(f"  failed: {failure}", file=sys.stderr)
        finally:
            for proc in procs:
                if proc.proc.poll() is None:
                    await proc.stop()
            got = rx.stop()
    cpu: dict[str, float] = {}
    for proc in procs:  # a rollback starts the previous release a second time
        name = f"{proc.release.label} {proc.name}"
        cpu[name if name not in cpu else f"{name} (again)"] = proc.cpu_share
    cpu["this benchmark (clients)"] = (own_cpu_s() - bench_cpu0) / (time.monotonic() - bench_t0)
    facts = (
        f"{await server_facts(dsn)}; every process on one {os.cpu_count()}-core machine, "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    )
    f = figures(args, old, new, load, phases, events, got, exits, facts, cpu)
    f["migrations"] = migrations
    return f


def figures(
    args: argparse.Namespace,
    old: Release,
    new: Release,
    load: Load,
    phases: list[Phase],
    events: list[str],
    got: dict[str, Any],
    exits: dict[str, int],
    facts: str,
    cpu: dict[str, float],
) -> dict[str, Any]:
    answered: dict[str, int] = got["answered_2xx"]
    expected = set(events)
    lost = sorted(expected - set(answered))
    duplicates = sum(n - 1 for e, n in answered.items() if e in expected and n > 1)
    late, missed_sse, missed_lp = lateness(load)
    by_release: dict[str, dict[str, Any]] = {}
    for release_ in (old, new):
        label = release_.label
        asked = {k: n for k, n in load.requests.items() if k[0] == label}
        load_reqs = {k: n for k, n in asked.items() if k[1] in ("submit", "complete")}
        by_release[label] = {
            "sent": sum(load_reqs.values()),
            "2xx": sum(n for k, n in load_reqs.items() if k[2].startswith("2")),
            # Answers other than 2xx (a long poll's 304 is its wait running out).
            "non_2xx": {
                f"{k[1]} {k[2]}": n
                for k, n in sorted(asked.items())
                if k[2][0].isdigit()
                and not k[2].startswith("2")
                and not (k[1] == "long poll" and k[2] == "304")
            },
            # Requests that got no answer (refused, reset), each tried again elsewhere.
            "failed": {
                f"{k[1]} {k[2]}": n for k, n in sorted(asked.items()) if not k[2][0].isdigit()
            },
        }
        for kind, key in (("sse", "sse"), ("long poll", "long_poll")):
            mine = [s for k, lb, _, s in late if k == kind and lb == label]
            by_release[label][f"{key}_p99_s"] = percentile(mine, 0.99)
            by_release[label][f"{key}_worst_s"] = worst(mine)
    lat_ms: list[float] = got["latencies_ms"]
    committed: list[float] = got["committed_at"]
    per_phase = []
    for p in phases:
        in_phase = [lat for lat, at in zip(lat_ms, committed, strict=True) if p.start <= at < p.end]
        stalls = [(kind, s) for kind, _, at, s in late if p.start <= at < p.end]
        per_phase.append(
            {
                "phase": p.name,
                "seconds": p.end - p.start,
                "receipts": len(in_phase),
                "p50_ms": percentile(in_phase, 0.5),
                "p99_ms": percentile(in_phase, 0.99),
                "max_ms": max(in_phase, default=float("nan")),
                "sse_worst_s": worst(s for kind, s in stalls if kind == "sse"),
                "long_poll_worst_s": worst(s for kind, s in stalls if kind == "long poll"),
                "client_lag_worst_s": worst(s for at, s in load.lag if p.start <= at < p.end),
            }
        )
    non_2xx = sum(sum(r["non_2xx"].values()) for r in by_release.values())
    failed = sum(sum(r["failed"].values()) for r in by_release.values())
    sse_worst = worst(s for kind, _, _, s in late if kind == "sse")
    lp_worst = worst(s for kind, _, _, s in late if kind == "long poll")
    misses = []
    if lost:
        misses.append(f"{len(lost)} lost")
    if duplicates:
        misses.append(f"{duplicates} duplicates")
    if non_2xx:
        misses.append(f"{non_2xx} answers other than 2xx")
    if failed:
        misses.append(f"{failed} requests unanswered (connection refused or reset)")
    if missed_sse or missed_lp:
        misses.append(
            f"{missed_sse} completions never seen by an SSE client, {missed_lp} by a long poll"
        )
    if not load.streams or (args.long_poll_every and not load.long_polls):
        misses.append("no SSE stream or no long poll was measured")
    latest = max((x for x in (sse_worst, lp_worst) if x == x), default=0.0)
    if latest > TARGET_S:
        misses.append(f"a change seen {latest:.2f} s late (target {TARGET_S:g} s)")
    if any(code != 0 for code in exits.values()):
        misses.append(f"exit statuses after SIGTERM: {exits}")
    return {
        "from": old.label,
        "to": new.label,
        "facts": facts,
        "rate": args.rate,
        "phase_s": args.phase_s,
        "sse_per_api": args.sse,
        "long_poll_every": args.long_poll_every,
        "submitted": sum(n for k, n in load.requests.items() if k[1:] == ("submit", "202")),
        "completed": len(load.completed),
        "events": len(expected),
        "delivered": len(expected & set(answered)),
        "lost": len(lost),
        "lost_sample": lost[:5],
        "duplicates": duplicates,
        "non_2xx": non_2xx,
        "failed": failed,
        "by_release": by_release,
        "sse_clients": len(load.streams),
        "sse_reconnects": sum(s.reconnects for s in load.streams),
        "sse_missed": missed_sse,
        "sse_worst_s": sse_worst,
        "long_polls": sum(1 for t in load.long_polls if t in load.completed),
        "long_poll_missed": missed_lp,
        "long_poll_worst_s": lp_worst,
        "phases": per_phase,
        "exits": exits,
        "cpu": cpu,
        "misses": misses,
        # Every sighting: (sse | long poll, the release serving it, completedAt, s late).
        "sightings": late,
    }


def table(f: dict[str, Any]) -> str:
    old, new = f["from"], f["to"]
    rel = f["by_release"]
    lines = [
        f"From {old} to {new}: {f['rate']:g} tasks/s submitted and completed through the APIs "
        f"round-robin, {f['phase_s']:g} s a phase; {f['sse_per_api']} SSE streams per API "
        f"and a long poll on 1 task in {f['long_poll_every']}, through the other API; "
        f"`migrate` applied {', '.join(f['migrations']) or 'nothing'}; {f['facts']}.",
        "",
        f"| answered by | {old} | {new} |",
        "|---|---|---|",
        f"| requests sent (submit + complete) | {rel[old]['sent']:,} | {rel[new]['sent']:,} |",
        f"| 2xx | {rel[old]['2xx']:,} | {rel[new]['2xx']:,} |",
        "| anything else, by status | "
        + " | ".join(
            ", ".join(f"{k}: {n}" for k, n in rel[r]["non_2xx"].items()) or "none"
            for r in (old, new)
        )
        + " |",
        "| no answer (refused, reset), tried again elsewhere | "
        + " | ".join(
            ", ".join(f"{k}: {n}" for k, n in rel[r]["failed"].items()) or "none"
            for r in (old, new)
        )
        + " |",
        "| completion → seen by an SSE client, p99 / max ms | "
        + " | ".join(f"{ms(rel[r]['sse_p99_s'])} / {ms(rel[r]['sse_worst_s'])}" for r in (old, new))
        + " |",
        "| completion → long poll answered, p99 / max ms | "
        + " | ".join(
            f"{ms(rel[r]['long_poll_p99_s'])} / {ms(rel[r]['long_poll_worst_s'])}"
            for r in (old, new)
        )
        + " |",
        "",
        f"Webhooks: {f['completed']:,} tasks completed, {f['delivered']:,} delivered, "
        f"**{f['lost']} lost, {f['duplicates']} duplicates**. SSE: {f['sse_clients']} clients, "
        f"{f['sse_reconnects']} reconnects (to another API when theirs stopped), "
        f"{f['sse_missed']} completions missed, longest {ms(f['sse_worst_s'])} ms. "
        f"Long polls: {f['long_polls']:,}, {f['long_poll_missed']} never answered, "
        f"longest {ms(f['long_poll_worst_s'])} ms.",
        "",
        "| phase | s | receipts | complete→receipt p50 / p99 / max ms | longest SSE, ms "
        "| longest long poll, ms | clients' own loop, worst lag ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in f["phases"]:
        lines.append(
            f"| {p['phase']} | {p['seconds']:.0f} | {p['receipts']:,} | "
            f"{p['p50_ms']:.1f} / {p['p99_ms']:.1f} / {p['max_ms']:.1f} | "
            f"{ms(p['sse_worst_s'])} | {ms(p['long_poll_worst_s'])} | "
            f"{ms(p['client_lag_worst_s'])} |"
        )
    shares = ", ".join(f"{name} {share:.0%}" for name, share in f["cpu"].items())
    exits = ", ".join(f"{name} {code}" for name, code in f["exits"].items())
    verdict = "; ".join(f["misses"]) if f["misses"] else "every target met"
    lines += [
        "",
        f"CPU, as a share of one core over each process's life (an API with its "
        f"workers): {shares}. "
        f"Exit statuses after SIGTERM: {exits}.",
        "",
        f"Targets (0 lost, 0 duplicates, 0 non-2xx, nothing later than 1 s): {verdict}.",
    ]
    return "\n".join(lines) + "\n"


async def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench upgrade")
    p.add_argument("--from", dest="from_ref", default=PREVIOUS, help="the previous release")
    p.add_argument("--rate", type=float, default=100, help="tasks a second")
    p.add_argument("--phase-s", type=float, default=20)
    p.add_argument("--hold-s", type=float, default=0.3, help="from submit to complete")
    p.add_argument("--sse", type=int, default=2, help="SSE streams per API")
    p.add_argument("--long-poll-every", type=int, default=2)
    p.add_argument("--rollback", action="store_true")
    p.add_argument("--drain-s", type=float, default=DRAIN_S, help="from leaving to SIGTERM")
    p.add_argument("--cache", default=None, help="where the previous release's venv is kept")
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args()
    f = await scenario(args)
    text = table(f)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(f, indent=2, default=str))
    rollback = " --rollback" if args.rollback else ""
    # A run from another release than the previous one gets a section of its own.
    section = "upgrade: a rolling upgrade under load"
    if args.from_ref != PREVIOUS:
        section += f", from {args.from_ref}"
    record(
        section,
        f"python -m bench upgrade --from {args.from_ref} --rate {args.rate:g} "
        f"--phase-s {args.phase_s:g} --hold-s {args.hold_s:g} --sse {args.sse} "
        f"--long-poll-every {args.long_poll_every} --drain-s {args.drain_s:g}{rollback}",
        text,
        file=RELIABILITY,
        header=RELIABILITY_HEADER,
    )
