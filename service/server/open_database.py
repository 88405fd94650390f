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
from hookrelay.outbox.store import check_schema, create_pool, dsn_through_pooler
from hookrelay.service.server.prerequisites import Runtime

log = logging.getLogger("hookrelay")


async def open_database(
    runtime: Runtime, *, check_key: bool = True, apply: bool | None = None
) -> None:
    """Check the schema (applying what is missing, as ``HOOKRELAY_MIGRATE`` says or as
    ``apply`` overrides), then verify (or first record) the master key."""
    if apply is None:
        apply = runtime.settings.migrate == "auto"
    await _note_pooler(runtime)
    # Migrations go the direct way when there is one: a transaction pooler may cut a
    # long transaction short (query_timeout, idle_transaction_timeout) or queue a
    # schema change behind every client waiting for a server connection.
    pool = await create_pool(
        runtime.listen_dsn,
        min_size=1,
        max_size=1,
        wait_s=runtime.settings.db_wait_s,
        prepared_statements=(
            True if runtime.listen_dsn != runtime.dsn else runtime.prepared_statements
        ),
    )
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


async def _note_pooler(runtime: Runtime) -> None:
    """Say once, at start, what a connection pooler on ``DATABASE_URL`` changes.

    Detected as :func:`~hookrelay.outbox.store.dsn_through_pooler` tells (the pools ask
    again for themselves under ``HOOKRELAY_PREPARED_STATEMENTS=auto``).
    """
    s = runtime.settings
    if runtime.embedded or not await dsn_through_pooler(runtime.dsn, wait_s=s.db_wait_s):
        return
    prepared = runtime.prepared_statements
    log.info(
        "DATABASE_URL reaches PostgreSQL through a connection pooler: prepared statements %s",
        "on (HOOKRELAY_PREPARED_STATEMENTS=on)" if prepared else "off",
    )
    if runtime.listen_dsn == runtime.dsn:
        log.warning(
            "LISTEN goes through that pooler too: a transaction pooler (PgBouncer's "
            "pool_mode = transaction) loses every notification, so wake-ups wait for "
            "the next poll; set HOOKRELAY_LISTEN_DATABASE_URL to a direct (or "
            "session-pooled) connection"
        )


def _forget_generated_key(runtime: Runtime) -> None:
    """Remove a key this start generated and the database refused: it encrypts nothing."""
    if not runtime.master_key_generated:
        return
    path = runtime.settings.data_dir / KEY_FILE
    with contextlib.suppress(OSError, ConfigurationError):
        if key_id(parse_master_key(path.read_text())) == runtime.secret_box.key_id:
            path.unlink()
