"""The database's own commands: ``hookrelay migrate [--status]`` and ``master-key rotate``."""

from __future__ import annotations

import argparse
import os
import secrets
from pathlib import Path
from typing import Any

from hookrelay.outbox.errors import ConfigurationError
from hookrelay.outbox.keys import (
    HOW_TO_GENERATE,
    KEY_FILE,
    SecretBox,
    parse_master_key,
    rotate_master_key,
)
from hookrelay.outbox.store import migration_status
from hookrelay.service.server.open_database import open_database
from hookrelay.service.server.prerequisites import Runtime

NEW_KEY_VAR = "HOOKRELAY_NEW_MASTER_KEY"


def add_parsers(sub: Any) -> None:
    migrate = sub.add_parser("migrate", help="apply pending schema migrations")
    migrate.add_argument(
        "--status", action="store_true", help="list migrations, applied and pending; change nothing"
    )
    key = sub.add_parser("master-key", help="manage the master key")
    actions = key.add_subparsers(dest="action", required=True)
    actions.add_parser(
        "rotate",
        help=f"re-encrypt every signing secret and callback header under the key in {NEW_KEY_VAR}",
    )


async def run_migrate(runtime: Runtime, args: argparse.Namespace) -> None:
    if not args.status:
        # A key this run had to invent must not become the database's key:
        # `migrate` is often run by a deploy step that holds no key at all.
        # The privileged step: it applies what is missing whatever HOOKRELAY_MIGRATE says.
        await open_database(runtime, check_key=not runtime.master_key_generated, apply=True)
        return
    pool = await runtime.open_pool(max_size=1)
    try:
        async with pool.acquire() as conn:
            rows = await migration_status(conn)
    finally:
        await pool.close()
    for m in rows:
        when = "" if m.applied_at is None else f"  {m.applied_at.isoformat()}"
        if m.state == "applied" and m.applied_at is None:
            when = "  (from before migrations; recorded at the next migrate)"
        state = {
            "unknown": "applied, unknown to this release",
            "unknown-compatible": "applied, unknown to this release, declared compatible",
        }.get(m.state, m.state)
        print(f"{m.version:04d}  {m.name:<32} {state}{when}")
    pending = sum(m.state == "pending" for m in rows)
    unknown = sum(m.state.startswith("unknown") for m in rows)
    summary = f"{len(rows) - pending - unknown} applied, {pending} pending"
    if unknown:
        summary += f", {unknown} unknown to this release (applied by a newer one)"
    print(f"\n{summary}")


async def run_rotate(runtime: Runtime) -> None:
    raw = os.environ.get(NEW_KEY_VAR, "").strip()
    if not raw:
        raise ConfigurationError(f"{NEW_KEY_VAR} is not set; {HOW_TO_GENERATE}")
    try:
        new_key = parse_master_key(raw)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{NEW_KEY_VAR}: {exc}") from None
    new = SecretBox(new_key)
    old = runtime.secret_box
    if new.key_id == old.key_id:
        raise ConfigurationError(f"{NEW_KEY_VAR} is the current key ({old.key_id})")
    await open_database(runtime)
    pool = await runtime.open_pool(max_size=1)
    try:
        async with pool.acquire() as conn:
            count = await rotate_master_key(conn, old, new)
    finally:
        await pool.close()
    print(f"re-encrypted {count} signing secret(s): master key id {old.key_id} -> {new.key_id}")
    if runtime.settings.master_key is None:
        path = runtime.settings.data_dir / KEY_FILE
        _replace_key_file(path, raw)
        print(f"{path} now holds the new key")
    print(
        f"next: set HOOKRELAY_MASTER_KEY to the value of {NEW_KEY_VAR} (key id {new.key_id}) "
        "for every hookrelay process and restart them; a process still holding the old key "
        "is refused at start"
    )


def _replace_key_file(path: Path, text: str) -> None:
    # Atomic: a crash leaves the old key or the new one, never half a file.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
