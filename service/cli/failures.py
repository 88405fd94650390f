"""Every way a CLI command can fail, as an exit status and one line saying what to fix.

2 is a configuration the operator must change (a setting, DATABASE_URL's
credentials, a busy port, a missing data directory); 1 is anything else (the
database unreachable, a dead letter not found). No traceback reaches the
terminal unless ``-v`` asked for it, and no secret does: DSN passwords and the
configured token and key are masked by :func:`hookrelay.service.server.tty_text.one_line`.
"""

from __future__ import annotations

import asyncpg

from hookrelay.outbox.errors import ConfigurationError, DatabaseUnavailable, OutboxError
from hookrelay.service.api.errors import ApiError
from hookrelay.service.server.settings import SettingsError
from hookrelay.service.server.supervisor import WorkerFailed

CONFIG = 2
FAILURE = 1


def explain(exc: BaseException) -> tuple[int, str]:
    """``(exit status, message)`` for an exception that ended a command."""
    if isinstance(exc, WorkerFailed):
        return exc.status, str(exc)
    if isinstance(exc, SettingsError):
        return CONFIG, str(exc).replace(":\n  ", ": ").replace("\n  ", "; ")
    if isinstance(exc, ConfigurationError):
        return CONFIG, str(exc)
    if isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError):
        # Wrong password, unknown role, no pg_hba.conf entry: the login was refused.
        return (
            CONFIG,
            f"the database refused the login: {exc}; fix the user or password in DATABASE_URL",
        )
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return CONFIG, f"{exc}: create it, or fix the database name in DATABASE_URL"
    if isinstance(exc, asyncpg.InsufficientPrivilegeError):
        return CONFIG, f"{exc}: give the DATABASE_URL user the rights hookrelay needs"
    if isinstance(exc, DatabaseUnavailable):
        return FAILURE, f"{exc}; check that the server runs and that DATABASE_URL points to it"
    if isinstance(exc, asyncpg.PostgresError):
        return FAILURE, f"database error {exc.sqlstate}: {exc}"
    if isinstance(exc, OutboxError):
        return FAILURE, str(exc)
    if isinstance(exc, ApiError):
        return CONFIG, exc.message
    if isinstance(exc, PermissionError):
        return (
            CONFIG,
            f"permission denied: {exc.filename}; fix its owner or mode, or HOOKRELAY_DATA_DIR",
        )
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return FAILURE, f"{exc.strerror or exc}{where}"
    return FAILURE, f"unexpected {type(exc).__name__}: {exc} (run with -v for the traceback)"
