"""Long-poll support: one LISTEN connection per process fans task changes out to waiters.

A waiter holds an asyncio.Event, not a database connection or a thread, so
thousands of ``?wait=`` requests cost one connection in all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator

from outbox.listener import Listener
from outbox.store import TASKS_CHANNEL


class TaskWatcher:
    def __init__(self, dsn: str) -> None:
        self._waiters: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self._released = False
        self._listener = Listener(
            dsn, TASKS_CHANNEL, self._notified, on_gap=self._wake_all, name="hookrelay-watcher"
        )

    @property
    def connected(self) -> bool:
        """Whether the LISTEN is in place. Connecting wakes every waiter once (a gap)."""
        return self._listener.connected

    async def start(self) -> None:
        await self._listener.start()

    async def stop(self) -> None:
        await self._listener.stop()

    @contextlib.contextmanager
    def watch(self, task_id: str) -> Iterator[asyncio.Event]:
        """An event set when ``task_id`` changes; subscribe *before* reading the task.

        Once shutdown began (:meth:`release_all`) the event is already set.
        """
        event = asyncio.Event()
        if self._released:
            event.set()
        self._waiters[task_id].add(event)
        try:
            yield event
        finally:
            waiting = self._waiters.get(task_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiters[task_id]

    def release_all(self) -> None:
        """Shutdown began: every long-poll answers now, with the task as it is.

        A waiter would otherwise hold its response open until its ``?wait`` ran
        out, past uvicorn's graceful timeout, and be cut off instead of answered.
        """
        self._released = True
        self._wake_all()

    def _notified(self, task_id: str) -> None:
        for event in self._waiters.get(task_id, ()):
            event.set()

    def _wake_all(self) -> None:
        # After a lost connection we may have missed notifications: let every
        # waiter re-read rather than sleep through a change.
        for waiting in self._waiters.values():
            for event in waiting:
                event.set()
