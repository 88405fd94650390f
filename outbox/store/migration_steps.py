"""Migration steps SQL cannot express, keyed by migration name (its number may change).

``hookrelay.outbox.store.migrations`` runs a migration's step right after its SQL, in the same
transaction and under the same advisory lock, so a step is applied exactly
once, together with its migration, or not at all. A step's statements are here too,
beside it (they run for that migration only).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg

from hookrelay.outbox.destinations import host_key
from hookrelay.outbox.errors import InvalidCallbackUrl
from hookrelay.outbox.sql import sql

Step = Callable[[asyncpg.Connection], Awaitable[None]]

# host_keys: stored keys rewritten to the form of hookrelay.outbox.destinations.
_DESTINATION_URLS = sql("destination_urls")
_REKEY_OUTBOX = sql("rekey_outbox")
_REKEY_DEAD_LETTERS = sql("rekey_dead_letters")
_COPY_DESTINATIONS = sql("copy_destinations_rekeyed")
_DROP_UNKEYED = sql("drop_unkeyed_destinations")


async def destination_urls(conn: asyncpg.Connection) -> list[tuple[str, str]]:
    """Distinct (callback URL, stored key) pairs of waiting and dead-lettered events."""
    return [(r[0], r[1]) for r in await conn.fetch(_DESTINATION_URLS)]


async def rekey_events(conn: asyncpg.Connection, *, keys: dict[str, str]) -> None:
    """Give the outbox and dead-letter rows of each callback URL its key in ``keys``."""
    urls, hosts = list(keys), list(keys.values())
    await conn.execute(_REKEY_OUTBOX, urls, hosts)
    await conn.execute(_REKEY_DEAD_LETTERS, urls, hosts)


async def rekey_destinations(conn: asyncpg.Connection, *, moves: set[tuple[str, str]]) -> None:
    """Move circuit state along the (old key, new key) pairs; drop what is left unkeyed."""
    ordered = sorted(moves)
    await conn.execute(_COPY_DESTINATIONS, [m[0] for m in ordered], [m[1] for m in ordered])
    await conn.execute(_DROP_UNKEYED)


async def rekey_hosts(conn: asyncpg.Connection) -> None:
    """Rewrite stored host keys (``host[:port]`` spellings) to the form of
    ``hookrelay.outbox.destinations``.

    Keys are derived from the callback URLs of waiting and dead-lettered events;
    circuit state follows them, merged where spellings meet (the worst wins).
    """
    keys: dict[str, str] = {}
    moves: set[tuple[str, str]] = set()
    for url, old in await destination_urls(conn):
        try:
            new = host_key(url)
        except InvalidCallbackUrl:
            continue  # never accepted today; it keeps the key it has
        keys[url] = new
        moves.add((old, new))
    await rekey_events(conn, keys=keys)
    await rekey_destinations(conn, moves=moves)


STEPS: dict[str, Step] = {"host_keys": rekey_hosts}
