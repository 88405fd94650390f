"""What a process needs before it serves: the database DSN, the admin token, the master key.

Only ``serve`` and ``migrate`` may create a data directory. Every other
command that would need one (for the embedded database, or for a key or token
not given in the environment) refuses when it is missing: run from the wrong
folder, it would otherwise start a new, empty database there.
"""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass, replace
from pathlib import Path

import asyncpg

from hookrelay.outbox.errors import ConfigurationError
from hookrelay.outbox.keys import KEY_FILE, SecretBox, load_or_create_master_key, parse_master_key
from hookrelay.outbox.store import create_pool
from hookrelay.service.server import embedded
from hookrelay.service.server.embedded import Embedded
from hookrelay.service.server.settings import Settings

log = logging.getLogger("hookrelay")
ADMIN_TOKEN_FILE = "admin-token"
_EMBEDDED = "DATABASE_URL is not set, so the embedded database would live there"


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    dsn: str
    admin_token: str
    secret_box: SecretBox
    admin_token_created: bool
    embedded: bool
    # No key was given and none was in the data dir: this start generated one.
    # It may only become the database's key if the database has none yet.
    master_key_generated: bool = False
    # The embedded server this process joined, to let go of at exit.
    server: Embedded | None = None

    def __repr__(self) -> str:
        return f"Runtime(embedded={self.embedded}, settings={self.settings!r})"

    @property
    def listen_dsn(self) -> str:
        """Where LISTEN and migrations connect: ``HOOKRELAY_LISTEN_DATABASE_URL``, a
        direct connection beside a transaction pooler, else the database's DSN."""
        return self.settings.listen_database_url or self.dsn

    @property
    def prepared_statements(self) -> bool | None:
        """For the pools on :attr:`dsn`: True, False, or None (ask the server first)."""
        if self.embedded and self.settings.prepared_statements == "auto":
            return True  # our own server, reached directly
        return self.settings.prepared_statements_choice()

    async def open_pool(self, *, max_size: int | None = None) -> asyncpg.Pool:
        """A pool on the database (``HOOKRELAY_DB_POOL_SIZE`` connections unless told),
        with prepared statements as ``HOOKRELAY_PREPARED_STATEMENTS`` says."""
        s = self.settings
        return await create_pool(
            self.dsn,
            min_size=1,
            max_size=max_size or s.db_pool_size,
            wait_s=s.db_wait_s,
            prepared_statements=self.prepared_statements,
        )

    def admin_token_source(self) -> str:
        """Where the admin token comes from, for the start banner (never the token)."""
        if self.settings.admin_token:
            return "HOOKRELAY_ADMIN_TOKEN"
        return str(self.settings.data_dir / ADMIN_TOKEN_FILE)

    def close(self) -> None:
        """Let go of the embedded server (it stops if no other process uses it)."""
        if self.server is not None:
            self.server.stop()


def _write_private(path: Path, text: str) -> bool:
    """Create ``path`` (0600) with ``text`` unless it exists; True if we created it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
    return True


def admin_token(settings: Settings) -> tuple[str, bool]:
    """The admin token from the environment, else from (or generated into) the data dir."""
    if settings.admin_token:
        return settings.admin_token, False
    path = settings.data_dir / ADMIN_TOKEN_FILE
    created = _write_private(path, "hra_" + secrets.token_urlsafe(32))
    return path.read_text().strip(), created


def existing_admin_token(settings: Settings) -> str:
    """The admin token from the environment, else the data dir's if there is one; never
    generates one ("" when there is none). For processes that only check it."""
    if settings.admin_token:
        return settings.admin_token
    try:
        return (settings.data_dir / ADMIN_TOKEN_FILE).read_text().strip()
    except OSError:  # none there, or not ours to read: the caller says it has none
        return ""


def absolute(settings: Settings) -> Settings:
    """``settings`` with the data directory made absolute, as it is printed and used."""
    return replace(settings, data_dir=settings.data_dir.absolute())


def require_data_dir(settings: Settings, *, may_create: bool, why: str) -> None:
    """Refuse in one line if the data directory is missing and this command may not create it."""
    path = settings.data_dir
    if may_create or path.is_dir():
        return
    raise ConfigurationError(
        f"no hookrelay data directory at {path} ({why}): set HOOKRELAY_DATA_DIR to the "
        "directory `hookrelay serve` uses, or DATABASE_URL to your database; only "
        "`hookrelay serve` and `hookrelay migrate` create a data directory"
    )


def open_dsn(settings: Settings, *, may_create: bool) -> tuple[str, Embedded | None]:
    """``DATABASE_URL``, or the embedded server under the data directory (started or joined)."""
    if settings.database_url is not None:
        return settings.database_url, None
    require_data_dir(settings, may_create=may_create, why=_EMBEDDED)
    if not may_create and not (settings.data_dir / "pg" / "PG_VERSION").exists():
        raise ConfigurationError(
            f"no embedded database in {settings.data_dir / 'pg'}: set HOOKRELAY_DATA_DIR to "
            "the directory `hookrelay serve` uses, or DATABASE_URL to your database"
        )
    server = embedded.open_server(settings.data_dir)
    return server.dsn, server


def prepare(settings: Settings, *, may_create: bool = True, needs_token: bool = True) -> Runtime:
    """Resolve the DSN (starting the embedded server if needed), token and key."""
    settings = absolute(settings)
    reasons = [
        why
        for why, needed in (
            (_EMBEDDED, settings.database_url is None),
            ("HOOKRELAY_MASTER_KEY is not set", not settings.master_key),
            ("HOOKRELAY_ADMIN_TOKEN is not set", needs_token and not settings.admin_token),
        )
        if needed
    ]
    if reasons:
        require_data_dir(settings, may_create=may_create, why=reasons[0])
    dsn, server = open_dsn(settings, may_create=may_create)
    try:
        token, created = admin_token(settings) if needs_token else ("", False)
        generated = not settings.master_key and not (settings.data_dir / KEY_FILE).exists()
        key = (
            parse_master_key(settings.master_key)
            if settings.master_key
            else load_or_create_master_key(None, settings.data_dir)
        )
    except BaseException:
        if server is not None:
            server.stop()
        raise
    return Runtime(
        settings, dsn, token, SecretBox(key), created, server is not None, generated, server
    )
