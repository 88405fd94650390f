"""The host-key migration step: rows of a populated database get canonical keys."""

from __future__ import annotations

import asyncpg
import pytest

from hookrelay.outbox.store.migrations import migrate, migrations
from tests.conftest import NewDb
from tests.test_migrate import run_migrate

pytestmark = pytest.mark.anyio

HOST_KEYS = next(m.version for m in migrations() if m.name == "host_keys")

# (callback URL, the key the previous version stored for it)
EVENTS = [
    ("http://[::ffff:127.0.0.1]:8080/a", "::ffff:127.0.0.1:8080"),
    ("http://127.0.0.1:8080/b", "127.0.0.1:8080"),
    ("https://Bücher.example./x", "bücher.example."),
    ("https://hooks.example.com/x", "hooks.example.com"),
    ("http://hooks.example.com/y", "hooks.example.com"),
]
DEAD = ("http://127.1:8080/c", "127.1:8080")


async def populate(conn: asyncpg.Connection) -> None:
    # Their tenant: a later migration (tenant_deletion) removes rows whose tenant is gone.
    await conn.execute(
        "INSERT INTO tenants (id, name, api_key_hash) VALUES ('ten_1', 'one', '\\x01')"
    )
    for n, (url, host) in enumerate(EVENTS):
        await conn.execute(
            "INSERT INTO outbox (event_id, tenant_id, task_id, event_type, callback_url, host,"
            " body) VALUES ($1, 'ten_1', $2, 'task.succeeded', $3, $4, '{}')",
            f"evt_{n}",
            f"task_{n}",
            url,
            host,
        )
    await conn.execute(
        "INSERT INTO dead_letters (event_id, tenant_id, task_id, event_type, callback_url, host,"
        " body, created_at, attempts) VALUES ('evt_d', 'ten_1', 'task_d', 'task.failed', $1, $2,"
        " '{}', now(), 18)",
        *DEAD,
    )
    for host, state, failures in [
        ("::ffff:127.0.0.1:8080", "open", 12),
        ("127.0.0.1:8080", "closed", 2),
        ("127.1:8080", "closed", 1),
        ("hooks.example.com", "open", 10),
        ("gone.example", "open", 30),  # no event left that says which scheme it was
    ]:
        await conn.execute(
            "INSERT INTO destinations (host, state, consecutive_failures, probe_at)"
            " VALUES ($1, $2, $3, now())",
            host,
            state,
            failures,
        )


async def test_upgrade_rekeys_events_dead_letters_and_circuits(new_db: NewDb) -> None:
    dsn = await new_db()
    await run_migrate(dsn, upto=HOST_KEYS - 1)
    conn = await asyncpg.connect(dsn)
    try:
        await populate(conn)
        applied = [m.name for m in await migrate(conn)]
        assert "host_keys" in applied
        hosts = dict(await conn.fetch("SELECT callback_url, host FROM outbox"))
        assert hosts == {
            "http://[::ffff:127.0.0.1]:8080/a": "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/b": "http://127.0.0.1:8080",
            "https://Bücher.example./x": "https://xn--bcher-kva.example:443",
            "https://hooks.example.com/x": "https://hooks.example.com:443",
            "http://hooks.example.com/y": "http://hooks.example.com:80",
        }
        assert await conn.fetchval("SELECT host FROM dead_letters") == "http://127.0.0.1:8080"
        circuits = {
            r["host"]: (r["state"], r["consecutive_failures"])
            for r in await conn.fetch("SELECT * FROM destinations")
        }
        assert circuits == {
            # three spellings of one receiver merged; the worst state wins
            "http://127.0.0.1:8080": ("open", 12),
            # one old key stood for both schemes: both keep its open circuit
            "https://hooks.example.com:443": ("open", 10),
            "http://hooks.example.com:80": ("open", 10),
        }
        assert [m.name for m in await migrate(conn)] == []  # once only
    finally:
        await conn.close()
