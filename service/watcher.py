"""Long-poll support: one LISTEN connection per process fans task changes out to waiters.

A waiter holds an asyncio.Event, not a database connection or a thread, so
thousands of ``?wait=`` requests cost one connection in all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterator

import asyncpg

from outbox import queries
from outbox.db import connect

log = logging.getLogger("hookrelay.watcher")
RECONNECT_S = 1.0


class TaskWatcher:
    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._waiters: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    async def start(self) -> None:
        self._task = asyncio.create_task(self._keep_listening(), name="hookrelay-watcher")

    async def stop(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()

    @contextlib.contextmanager
    def watch(self, task_id: str) -> Iterator[asyncio.Event]:
        """An event set when ``task_id`` changes; subscribe *before* reading the task."""
        event = asyncio.Event()
        self._waiters[task_id].add(event)
        try:
            yield event
        finally:
            waiting = self._waiters.get(task_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiters[task_id]

    def _notified(self, _conn: object, _pid: int, _channel: str, task_id: str) -> None:
        for event in self._waiters.get(task_id, ()):
            event.set()

    def _wake_all(self) -> None:
        # After a lost connection we may have missed notifications: let every
        # waiter re-read rather than sleep through a change.
        for waiting in self._waiters.values():
            for event in waiting:
                event.set()

    async def _keep_listening(self) -> None:
        while not self._closing:
            try:
                self._conn = await connect(self._dsn, wait_s=RECONNECT_S * 5)
                await self._conn.add_listener(queries.TASKS_CHANNEL, self._notified)
                lost = asyncio.Event()
                self._conn.add_termination_listener(lambda *_, lost=lost: lost.set())
                self._wake_all()
                await lost.wait()
                log.warning("task listener connection lost; reconnecting")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("task listener unavailable: %s", exc)
            self._wake_all()
            await asyncio.sleep(RECONNECT_S)
