"""Opening the database at start: the schema first, then the master key check.

Every process runs this before it serves or dispatches anything, so a process
holding the wrong master key, or meeting a schema it cannot run on, exits at
once with one line instead of failing every request later. With
``HOOKRELAY_MIGRATE=auto`` missing migrations are applied here; with ``off``
nothing here runs DDL and a missing migration is refused (``hookrelay migrate``
is then the one privileged step).
"""

from __future__ import annotations

import contextlib
import logging

from hookrelay.outbox.errors import ConfigurationError
from hookrelay.outbox.keys import (
    KEY_FILE,
    MasterKeyMismatch,
    key_id,
    parse_master_key,
    verify_or_record,
)
from hookrelay.outbox.store import check_schema, create_pool
from hookrelay.service.server.prerequisites import Runtime

log = logging.getLogger("hookrelay")


async def open_database(
    runtime: Runtime, *, check_key: bool = True, apply: bool | None = None
) -> None:
    """Check the schema (applying what is missing, as ``HOOKRELAY_MIGRATE`` says or as
    ``apply`` overrides), then verify (or first record) the master key."""
    if apply is None:
        apply = runtime.settings.migrate == "auto"
    pool = await create_pool(runtime.dsn, min_size=1, max_size=1, wait_s=runtime.settings.db_wait_s)
    try:
        async with pool.acquire() as conn:
            state, applied = await check_schema(conn, apply=apply)
            for m in applied:
                log.info("applied migration %s", m.label)
            if state.unknown:
                log.warning(
                    "the database has migrations this release does not know, declared "
                    "compatible with older releases: %s; running beside them",
                    state.unknown_labels,
                )
            if not check_key:
                return
            try:
                check = await verify_or_record(
                    conn, runtime.secret_box, generated=runtime.master_key_generated
                )
            except MasterKeyMismatch:
                _forget_generated_key(runtime)
                raise
            if check.recorded:
                log.info("recorded master key id %s for this database", check.key_id)
    finally:
        await pool.close()


def _forget_generated_key(runtime: Runtime) -> None:
    """Remove a key this start generated and the database refused: it encrypts nothing."""
    if not runtime.master_key_generated:
        return
    path = runtime.settings.data_dir / KEY_FILE
    with contextlib.suppress(OSError, ConfigurationError):
        if key_id(parse_master_key(path.read_text())) == runtime.secret_box.key_id:
            path.unlink()
