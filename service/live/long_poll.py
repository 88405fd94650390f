"""Long-poll support: one LISTEN connection per process fans task changes out to waiters.

A waiter holds an asyncio.Event, not a database connection or a thread, so
thousands of ``?wait=`` requests cost one connection in all. A waiter wakes on
a change committed by this process (:meth:`TaskWatcher.notify`, called after
the commit), by another API process (the numberer's ``hookrelay_changes``
notification names the task) or by an executor's own transaction (its
``hookrelay_tasks`` notification, sent at commit).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator

from hookrelay.outbox.store import CHANGES_CHANNEL, TASKS_CHANNEL, Listener, parse_changes


class TaskWatcher:
    def __init__(self, listener: Listener) -> None:
        """Waiters woken through ``listener``, the process's LISTEN (its owner starts it)."""
        self._waiters: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self._released = False
        self._listener = listener
        self._listener.join(
            {TASKS_CHANNEL: self.notify, CHANGES_CHANNEL: self._changed}, on_gap=self._wake_all
        )

    @property
    def connected(self) -> bool:
        """Whether the LISTEN is in place. Connecting wakes every waiter once (a gap)."""
        return self._listener.connected

    def start(self) -> None:
        """Waiters wait again (an app may be started again after a shutdown)."""
        self._released = False

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

    @property
    def released(self) -> bool:
        """Shutdown began: waits end now."""
        return self._released

    def release_all(self) -> None:
        """Shutdown began: every long-poll answers now, with the task as it is.

        A waiter would otherwise hold its response open until its ``?wait`` ran
        out, past uvicorn's graceful timeout, and be cut off instead of answered.
        """
        self._released = True
        self._wake_all()

    def notify(self, task_id: str) -> None:
        """``task_id`` changed (its change committed): its waiters read it again."""
        for event in self._waiters.get(task_id, ()):
            event.set()

    def _changed(self, payload: str) -> None:
        changed = parse_changes(payload)
        if changed is None:
            self._wake_all()
            return
        for c in changed:
            for task_id in c.task_ids:
                self.notify(task_id)

    def _wake_all(self) -> None:
        # After a lost connection we may have missed notifications: let every
        # waiter re-read rather than sleep through a change.
        for waiting in self._waiters.values():
            for event in waiting:
                event.set()
