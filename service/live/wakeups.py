"""What an API process does once a task write has committed: wake whoever waits on it.

The API's writes send no NOTIFY inside their transaction: notifying commits
queue on one lock across the whole PostgreSQL cluster, which capped every
tenant's writes at the rate that lock lets commits through. Instead, after the
commit, :meth:`Signals.committed`

- wakes this process's long-polls on the task at once;
- asks the stream hub to number the change, which pushes it to every stream
  (one numbering serves all the commits made while the previous one ran);
- for a new event, wakes the dispatchers: those of this process directly
  (``serve``), every other through one ``NOTIFY hookrelay_outbox`` per burst,
  sent from a pool connection outside any writer's transaction. The NOTIFY names
  this process when it has a dispatcher of its own, which then ignores it: it was
  woken at each commit already, and looking again cost a due-lanes read per burst.

A process that dies between a commit and these wake-ups loses nothing: the
dispatchers poll (``HOOKRELAY_POLL_INTERVAL_S``) and the sweeper numbers what is
queued at every sweep; only the push is late.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

import asyncpg

from hookrelay.outbox.store import events
from hookrelay.service.live import StreamHub
from hookrelay.service.live.coalesce import Coalesced
from hookrelay.service.live.long_poll import TaskWatcher

log = logging.getLogger("hookrelay.signals")


class Signals:
    """After-commit wake-ups of one API process (see the module docstring)."""

    def __init__(self, pool: asyncpg.Pool, hub: StreamHub, watcher: TaskWatcher) -> None:
        self._pool, self._hub, self._watcher = pool, hub, watcher
        self._local: list[Callable[[], None]] = []
        # Names this process in its NOTIFYs, so that a dispatcher it wakes directly
        # (wake_locally) does not look a second time for the same events.
        self.origin = f"api-{secrets.token_hex(8)}"
        self._outbox = Coalesced(self._notify_outbox, name="hookrelay-wake-dispatchers")

    def wake_locally(self, callback: Callable[[], None]) -> None:
        """Also call ``callback`` (a dispatcher of this process) for every new event."""
        self._local.append(callback)

    def committed(self, task_id: str, *, event: bool = False) -> None:
        """A change of ``task_id`` has committed; ``event``: with a new outbox event.

        Never raises: the write is committed, and a failed wake-up only makes a
        waiter find it at its next poll.
        """
        self._watcher.notify(task_id)
        self._hub.number_soon()
        if event:
            self._outbox.poke()
            for wake in self._local:
                try:
                    wake()
                except Exception as exc:  # e.g. that dispatcher's loop has closed
                    log.warning("could not wake a local dispatcher: %s", exc)

    async def _notify_outbox(self) -> None:
        async with self._pool.acquire() as conn:
            await events.notify_outbox(conn, origin=self.origin if self._local else "")

    async def stop(self) -> None:
        await self._outbox.stop()
