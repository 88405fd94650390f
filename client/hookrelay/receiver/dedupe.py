"""Deduplicate by ``webhook-id``: hookrelay delivers at least once.

A lost 2xx, a retry racing a slow answer, an ops replay or a partner's redeliver send
the same event again, always with the same ``webhook-id``. A store records the ids
processed; :meth:`~Seen.add` says whether an id is new::

    if seen.add(event.id):
        process(event)

The store is pluggable: :class:`MemorySeen` for tests and for receivers that may
forget on a restart; :mod:`hookrelay.receiver.postgres` keeps the ids in a table on the
receiver's own connection, so the id and the receiver's work commit together (or,
rolled back, neither: the retry then does the work).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol


class Seen(Protocol):
    def add(self, webhook_id: str) -> bool:
        """Record ``webhook_id``; True if it was not recorded before."""
        ...

    def discard(self, webhook_id: str) -> None:
        """Forget ``webhook_id`` (the work failed: let the retry do it)."""
        ...


class AsyncSeen(Protocol):
    async def add(self, webhook_id: str) -> bool: ...

    async def discard(self, webhook_id: str) -> None: ...


class MemorySeen:
    """The ids in this process's memory, the ``limit`` most recent; thread-safe."""

    def __init__(self, limit: int = 100_000) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def add(self, webhook_id: str) -> bool:
        with self._lock:
            if webhook_id in self._ids:
                self._ids.move_to_end(webhook_id)
                return False
            self._ids[webhook_id] = None
            if len(self._ids) > self._limit:
                self._ids.popitem(last=False)
            return True

    def discard(self, webhook_id: str) -> None:
        with self._lock:
            self._ids.pop(webhook_id, None)

    def __contains__(self, webhook_id: object) -> bool:
        with self._lock:
            return webhook_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)
