"""Every core: ``serve`` and ``api`` as several worker processes on one port.

``--workers N`` (over ``HOOKRELAY_WORKERS``). With one worker the command runs in
one process, as it always did. With more, the process that was started becomes
the supervisor. It binds the port and opens the database (starting the embedded
PostgreSQL, migrating) exactly as one process does, then starts

- N API workers, each running the API's uvicorn on the inherited listening
  socket: the kernel hands each new connection to one of them;
- for ``serve``, one more process for the dispatcher and the timeout sweeper,
  so that they run once, not once per worker.

The supervisor serves nothing itself. Its children are fresh interpreters
(``python -m hookrelay.service.server.worker``), not forks. prometheus_client
chooses how metrics are stored when it is first imported, and the supervisor
has imported it long before it knows it will have workers. A fork would also
copy the embedded server's handle and its exit hooks into every worker.

Stopping: the first SIGTERM or SIGINT closes the supervisor's copy of the socket
and sends SIGTERM to the API workers, which finish as one process does (streams
end, long polls answer, open requests finish). Then the dispatcher gets SIGTERM
and drains. Then the embedded server stops and the supervisor exits 0. A second
signal sends SIGINT to the workers, which means stop without waiting. The
children run in a session of their own, so a terminal's Ctrl-C reaches the
supervisor alone, which then stops them in that order. A repeated SIGTERM
changes nothing for a child: under systemd the service manager signals every
process of the unit as well.

Nothing is orphaned. Each child asks the kernel for SIGTERM when the supervisor
dies (``PR_SET_PDEATHSIG`` on Linux; elsewhere it checks its parent every
second), so a supervisor killed with SIGKILL takes its workers with it.

A child that exits while starting stops everything, and its error is on
stderr. One that dies later is replaced, at most once a second, or every 30 s
while it keeps dying.

Metrics: the children write counters and histograms to a private directory
(``PROMETHEUS_MULTIPROC_DIR``), created empty at start and removed at exit.
Whichever worker answers ``/metrics`` reads all of them and returns the sums
(service/api/routes/metrics.py).

Waking: a write in one worker reaches long polls and streams held by another
the way another host's writes do. Its numbering of the change sends one
``hookrelay_changes`` notification naming the task, which every worker's
LISTEN hears (service/live/long_poll.py, service/live/hub.py). A new event
wakes the dispatcher process with its ``hookrelay_outbox`` NOTIFY.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from hookrelay.outbox.errors import OutboxError
from hookrelay.outbox.keys import SecretBox, load_or_create_master_key
from hookrelay.service.server.lifecycle import Stopping
from hookrelay.service.server.prerequisites import Runtime
from hookrelay.service.server.settings import Settings

log = logging.getLogger("hookrelay")
WORKER_MODULE = "hookrelay.service.server.worker"
API, DISPATCHER = "api", "dispatcher"
# The default number of API workers of `api` is the CPUs this process may use, up to
# this many: each worker opens up to HOOKRELAY_DB_POOL_SIZE + 3 database connections,
# and PostgreSQL allows 100 by default (the embedded one too).
MAX_DEFAULT_WORKERS = 4
# A child that lived this long before dying is replaced after RESTART_S; one that died
# sooner waits twice as long each time, up to RESTART_MAX_S.
STEADY_S, RESTART_S, RESTART_MAX_S = 60.0, 1.0, 30.0
METRICS_PREFIX = "hookrelay-metrics-"


class WorkerFailed(OutboxError):
    """A worker process exited while starting; its own error is above on stderr."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


# -- how many ----------------------------------------------------------------------------


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The CPUs this process may run on: its affinity, lowered to a cgroup's CPU quota
    (a container's ``--cpus``), which the affinity does not show."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        count = os.cpu_count() or 1
    quota = _cgroup_cpu_quota(cgroup)
    if quota is not None:
        count = min(count, math.ceil(quota))
    return max(1, count)


def _cgroup_cpu_quota(root: Path) -> float | None:
    """CPUs' worth of time a cgroup allows (v2 ``cpu.max``, else v1), or None."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def default_workers(*, with_dispatcher: bool) -> int:
    """API workers when neither ``--workers`` nor ``HOOKRELAY_WORKERS`` says.

    ``api``: one per usable CPU, up to :data:`MAX_DEFAULT_WORKERS`. ``serve``: one.
    ``serve`` is the one-machine command, where the embedded PostgreSQL, the
    dispatcher and the API share the cores, and every process hears every change
    notification: a second worker costs more CPU per task than one process
    (docs/operations/benchmarks.md, "Workers").
    """
    if with_dispatcher:
        return 1
    return min(usable_cpus(), MAX_DEFAULT_WORKERS)


def workers_for(settings: Settings, *, with_dispatcher: bool) -> int:
    if settings.workers is not None:
        return settings.workers
    return default_workers(with_dispatcher=with_dispatcher)


def describe(workers: int, *, with_dispatcher: bool) -> str:
    """The banner's line on processes."""
    if workers == 1:
        return "one (API, dispatcher and sweeper)" if with_dispatcher else "one"
    parts = f"{workers} API workers"
    if with_dispatcher:
        parts += " + 1 for the dispatcher and sweeper"
    return f"{parts}, supervised by pid {os.getpid()}"


# -- what a worker is given ------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs, sent to it on its stdin (pickled: parent to child only)."""

    role: str
    settings: Settings
    dsn: str
    admin_token: str
    master_key: bytes = field(repr=False)
    embedded: bool
    socket_fd: int
    ready_fd: int
    supervisor_pid: int

    def runtime(self) -> Runtime:
        """The supervisor's runtime, without its handle on the embedded server."""
        return Runtime(
            self.settings,
            self.dsn,
            self.admin_token,
            SecretBox(self.master_key),
            admin_token_created=False,
            embedded=self.embedded,
        )


# -- the metrics directory ----------------------------------------------------------------


@contextlib.contextmanager
def metrics_directory() -> Iterator[Path]:
    """A new private directory for the children's metric files, removed at exit.

    Directories left by a supervisor that was killed are removed first.
    """
    parent = Path(tempfile.gettempdir())
    for stale in parent.glob(f"{METRICS_PREFIX}*-*"):
        try:
            pid = int(stale.name[len(METRICS_PREFIX) :].split("-", 1)[0])
        except ValueError:
            continue
        with contextlib.suppress(OSError):
            if stale.stat().st_uid == os.getuid() and not psutil.pid_exists(pid):
                shutil.rmtree(stale, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- the supervisor -------------------------------------------------------------------------


@dataclass(eq=False)
class _Child:
    role: str
    index: int
    proc: asyncio.subprocess.Process
    ready: asyncio.Future[bool]
    exited: asyncio.Task[int]
    started_at: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return f"{self.role} worker {self.index} (pid {self.proc.pid})"

    def signal(self, sig: int) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)


class Supervisor:
    """Starts, watches and stops the workers of one ``serve`` or ``api``."""

    def __init__(
        self,
        runtime: Runtime,
        sock: socket.socket,
        stopping: Stopping,
        *,
        workers: int,
        with_dispatcher: bool,
    ) -> None:
        self._runtime, self._sock = runtime, sock
        self._slots = [(API, i) for i in range(workers)]
        if with_dispatcher:
            self._slots.append((DISPATCHER, 0))
        self._children: dict[tuple[str, int], _Child] = {}
        self._replacing: set[asyncio.Future[Any]] = set()
        self._stop = asyncio.Event()
        self._env: dict[str, str] = {}
        s = runtime.settings
        self._master_key = load_or_create_master_key(s.master_key, s.data_dir)
        stopping.on_stop(self._stop.set, force=self._force)

    async def run(self, *, on_ready: Callable[[], None]) -> None:
        """Until the stop request; ``on_ready`` once every child is up."""
        with metrics_directory() as directory:
            self._env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
            try:
                if await self._start_all():
                    on_ready()
                    log.info("%d worker processes started", len(self._slots))
                    await self._supervise()
            finally:
                await self._stop_all()

    # -- starting --------------------------------------------------------------------------

    async def _spawn(self, role: str, index: int) -> _Child:
        loop = asyncio.get_running_loop()
        read_end, write_end = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                WORKER_MODULE,
                role,
                str(os.getpid()),
                stdin=asyncio.subprocess.PIPE,
                pass_fds=(self._sock.fileno(), write_end),
                start_new_session=True,
                env=self._env,
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        ready: asyncio.Future[bool] = loop.create_future()
        os.set_blocking(read_end, False)

        def readable() -> None:
            try:
                said = os.read(read_end, 1)
            except BlockingIOError:  # pragma: no cover - spurious wake-up
                return
            loop.remove_reader(read_end)
            os.close(read_end)
            if not ready.done():
                ready.set_result(bool(said))  # b"" is the end of the pipe: it exited

        loop.add_reader(read_end, readable)
        s = self._runtime
        spec = WorkerSpec(
            role=role,
            settings=s.settings,
            dsn=s.dsn,
            admin_token=s.admin_token,
            master_key=self._master_key,
            embedded=s.embedded,
            socket_fd=self._sock.fileno(),
            ready_fd=write_end,
            supervisor_pid=os.getpid(),
        )
        assert proc.stdin is not None
        with contextlib.suppress(ConnectionError):  # it died at once: its exit says why
            proc.stdin.write(pickle.dumps(spec))
            await proc.stdin.drain()
            proc.stdin.close()
        child = _Child(role, index, proc, ready, asyncio.create_task(proc.wait()))
        self._children[(role, index)] = child
        return child

    async def _start_all(self) -> bool:
        """Start every child; True once all are up, False if a stop came first."""
        children = [await self._spawn(role, index) for role, index in self._slots]
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            pending: set[asyncio.Future[Any]] = {c.ready for c in children}
            while pending:
                done, pending = await asyncio.wait(
                    {*pending, stop}, return_when=asyncio.FIRST_COMPLETED
                )
                if stop in done:
                    return False
                pending.discard(stop)
                for child in children:
                    if child.ready in done and not child.ready.result():
                        status = await child.exited
                        raise WorkerFailed(
                            f"the {child.name} exited with status {status} while starting",
                            status if status > 0 else 1,
                        )
            return True
        finally:
            stop.cancel()

    # -- watching ----------------------------------------------------------------------------

    async def _supervise(self) -> None:
        """Replace children that die, until the stop request."""
        delays = {slot: RESTART_S for slot in self._slots}
        while not self._stop.is_set():
            exits: dict[asyncio.Future[Any], tuple[str, int]] = {
                c.exited: slot for slot, c in self._children.items()
            }
            stop = asyncio.ensure_future(self._stop.wait())
            # A second at most, so that replacements started meanwhile are watched too.
            done, _ = await asyncio.wait(
                {stop, *exits}, timeout=1.0, return_when=asyncio.FIRST_COMPLETED
            )
            stop.cancel()
            for task in done:
                slot = exits.get(task)
                if slot is None:
                    continue
                child = self._children.pop(slot)
                if time.monotonic() - child.started_at > STEADY_S:
                    delays[slot] = RESTART_S
                log.error(
                    "the %s exited with status %s; another starts in %g s",
                    child.name,
                    task.result(),
                    delays[slot],
                )
                self._replacing.add(asyncio.ensure_future(self._replace(slot, delays[slot])))
                delays[slot] = min(delays[slot] * 2, RESTART_MAX_S)

    async def _replace(self, slot: tuple[str, int], delay: float) -> None:
        stop: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({stop}, timeout=delay)
            if self._stop.is_set():
                return
            child = await self._spawn(*slot)
            await asyncio.wait({stop, child.ready}, return_when=asyncio.FIRST_COMPLETED)
            if child.ready.done() and child.ready.result():
                log.info("the %s started", child.name)
        finally:
            stop.cancel()
            task = asyncio.current_task()
            if task is not None:
                self._replacing.discard(task)

    # -- stopping ----------------------------------------------------------------------------

    def _force(self) -> None:
        for child in list(self._children.values()):
            if child.role == API:
                child.signal(signal.SIGINT)

    async def _stop_all(self) -> None:
        """API workers first (they finish their requests), then the dispatcher (it drains)."""
        self._stop.set()
        if self._replacing:  # each returns at once, or once its child is spawned
            await asyncio.gather(*self._replacing, return_exceptions=True)
        # New connections now wait for no one: refused once every worker has let go.
        self._sock.close()
        for role in (API, DISPATCHER):
            group = [c for c in self._children.values() if c.role == role]
            for child in group:
                child.signal(signal.SIGTERM)
            for child in group:
                try:
                    status = await asyncio.shield(child.exited)
                except asyncio.CancelledError:  # pragma: no cover - the loop is going away
                    child.signal(signal.SIGKILL)
                    raise
                if status != 0:
                    log.warning("the %s exited with status %s", child.name, status)
        self._children.clear()
