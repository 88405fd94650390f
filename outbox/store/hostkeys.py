"""The host-key migration's statements: stored keys rewritten to the form of
``hookrelay.outbox.destinations``."""

from __future__ import annotations

import asyncpg

from hookrelay.outbox.sql import sql

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
