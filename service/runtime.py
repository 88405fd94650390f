"""What a process needs before it serves: the database DSN, the admin token, the master key."""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from outbox.crypto import KEY_FILE, SecretBox, load_or_create_master_key, parse_master_key

from . import embedded
from .settings import Settings

log = logging.getLogger("hookrelay")
ADMIN_TOKEN_FILE = "admin-token"


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

    def __repr__(self) -> str:
        return f"Runtime(embedded={self.embedded}, settings={self.settings!r})"


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


def prepare(settings: Settings, *, start_embedded: bool = True) -> Runtime:
    """Resolve the DSN (starting the embedded server if needed), token and key."""
    dsn = settings.database_url
    is_embedded = dsn is None
    if dsn is None:
        if not start_embedded:
            raise RuntimeError("DATABASE_URL is not set")
        dsn = embedded.start(settings.data_dir)
    token, created = admin_token(settings)
    generated = not settings.master_key and not (settings.data_dir / KEY_FILE).exists()
    key = (
        parse_master_key(settings.master_key)
        if settings.master_key
        else load_or_create_master_key(None, settings.data_dir)
    )
    return Runtime(settings, dsn, token, SecretBox(key), created, is_embedded, generated)
