"""One worker process of ``serve`` or ``api`` with several workers (service/server/supervisor.py).

Started by the supervisor as ``python -m hookrelay.service.server.worker ROLE SUPERVISOR_PID``,
with its :class:`~hookrelay.service.server.supervisor.WorkerSpec` on stdin, the listening
socket and a readiness pipe among its descriptors. ``api``: the API on the inherited
socket. ``dispatcher``: the dispatcher and the timeout sweeper. It writes one byte to
the pipe once it serves.

SIGTERM stops it as one process stops (a repeated one changes nothing); SIGINT
stops it without waiting. It dies with the supervisor.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import pickle
import signal
import socket
import sys

from hookrelay.outbox.errors import OutboxError
from hookrelay.outbox.tasks import sweeping
from hookrelay.service.server import event_loop as serving
from hookrelay.service.server import logs
from hookrelay.service.server.app import create_app
from hookrelay.service.server.background import make_dispatcher
from hookrelay.service.server.lifecycle import Stopping
from hookrelay.service.server.processes import run_api
from hookrelay.service.server.supervisor import API, DISPATCHER, WorkerSpec
from hookrelay.service.server.tty_text import fail

log = logging.getLogger("hookrelay")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
ORPHAN_CHECK_S = 1.0


def die_with(supervisor_pid: int) -> bool:
    """Ask for SIGTERM when the supervisor dies; True if the kernel will send it.

    False where there is no ``prctl`` (not Linux): :func:`_watch_parent` then checks.
    Exits at once if the supervisor is already gone.
    """
    armed = False
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        armed = int(libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)) == 0
    if os.getppid() != supervisor_pid:  # it died before we asked
        os._exit(0)
    return armed


async def _watch_parent(supervisor_pid: int) -> None:
    while os.getppid() == supervisor_pid:
        await asyncio.sleep(ORPHAN_CHECK_S)
    os.kill(os.getpid(), signal.SIGTERM)


def _said_ready(fd: int) -> None:
    os.write(fd, b"r")
    os.close(fd)


async def _api(spec: WorkerSpec, stopping: Stopping) -> int:
    runtime = spec.runtime()
    app = create_app(runtime)
    # /metrics sums these processes' CPU and memory (service/api/routes/metrics.py).
    app.state.process_tree = spec.supervisor_pid
    sock = socket.socket(fileno=spec.socket_fd)
    try:
        started = await run_api(
            runtime,
            app,
            sock,
            stopping,
            with_dispatcher=False,
            on_listening=lambda: _said_ready(spec.ready_fd),
        )
    finally:
        sock.close()
    return 0 if started else 1


async def _dispatcher(spec: WorkerSpec, stopping: Stopping) -> int:
    runtime = spec.runtime()
    s = runtime.settings
    pool = await runtime.open_pool()
    try:
        dispatcher = make_dispatcher(runtime, pool)
        stopping.on_stop(dispatcher.stop)
        async with sweeping(pool, s.sweep_interval_s, s.retention()):
            _said_ready(spec.ready_fd)
            log.info("dispatcher %s started", dispatcher.config.owner)
            await dispatcher.run()
    finally:
        await pool.close()
    return 0


async def _main(spec: WorkerSpec, watch: bool) -> int:
    stopping = Stopping()
    with stopping.handling_signals(forced_by=signal.SIGINT):
        watching = asyncio.create_task(_watch_parent(spec.supervisor_pid)) if watch else None
        try:
            if spec.role == API:
                return await _api(spec, stopping)
            assert spec.role == DISPATCHER, spec.role
            return await _dispatcher(spec, stopping)
        finally:
            if watching is not None:
                watching.cancel()


def main(argv: list[str]) -> int:
    _, supervisor_pid = argv
    # Until the loop handles it: Ctrl-C is the supervisor's (this runs in a session of
    # its own anyway), and SIGTERM may end a worker that is still starting.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    armed = die_with(int(supervisor_pid))
    spec: WorkerSpec = pickle.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    logs.configure(spec.settings.log_level)
    try:
        return serving.run(_main(spec, watch=not armed))
    except Exception as exc:
        # The supervisor checked the settings, the database and the key before starting
        # this: what fails here fails at run time. One line, as the CLI says it (the
        # traceback in the log at DEBUG); the supervisor then says which worker it was.
        log.debug("the %s worker failed", spec.role, exc_info=True)
        what = str(exc) if isinstance(exc, OutboxError) else f"{type(exc).__name__}: {exc}"
        fail(
            f"{spec.role} worker: {what}",
            secrets=(spec.settings.admin_token, spec.settings.master_key),
        )
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
