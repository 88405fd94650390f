"""Migration steps SQL cannot express, keyed by migration name (its number may change).

``hookrelay.outbox.store.migrate`` runs a migration's step right after its SQL, in the same
transaction and under the same advisory lock, so a step is applied exactly
once, together with its migration, or not at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg

from hookrelay.outbox.destinations import host_key
from hookrelay.outbox.errors import InvalidCallbackUrl
from hookrelay.outbox.store import hostkeys

Step = Callable[[asyncpg.Connection], Awaitable[None]]


async def rekey_hosts(conn: asyncpg.Connection) -> None:
    """Rewrite stored host keys (``host[:port]`` spellings) to the form of
    ``hookrelay.outbox.destinations``.

    Keys are derived from the callback URLs of waiting and dead-lettered events;
    circuit state follows them, merged where spellings meet (the worst wins).
    """
    keys: dict[str, str] = {}
    moves: set[tuple[str, str]] = set()
    for url, old in await hostkeys.destination_urls(conn):
        try:
            new = host_key(url)
        except InvalidCallbackUrl:
            continue  # never accepted today; it keeps the key it has
        keys[url] = new
        moves.add((old, new))
    await hostkeys.rekey_events(conn, keys=keys)
    await hostkeys.rekey_destinations(conn, moves=moves)


STEPS: dict[str, Step] = {"host_keys": rekey_hosts}
