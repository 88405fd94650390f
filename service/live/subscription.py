"""One consumer's view of a tenant's changes: a bounded queue, a filter, a position.

A subscription is *live* when the hub pushes changes into its queue, or
*catching up* when it reads the log itself, a page at a time, because it
resumed from an earlier position. Catching up is paced by the consumer (it
reads the next page only when it has taken the last), so neither mode buffers
without bound; a live consumer that falls more than ``queue_size`` behind is
dropped and resumes from the log with its last position.

What a subscription needs from its source is :class:`Feed`, a protocol owned here;
the hub (``hookrelay.service.live.hub``) implements it, so this module knows
nothing of the hub.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Protocol

from hookrelay.service.live.changes import Change, DropReason, Reset


class Feed(Protocol):
    """Where a subscription's changes come from (the stream hub)."""

    def index(self, sub: Subscription, task_ids: Iterable[str] | None) -> None:
        """``sub`` now watches these tasks (None: every task)."""
        ...

    def unindex(self, sub: Subscription, task_ids: Iterable[str] | None) -> None:
        """``sub`` no longer watches these tasks (None: no longer every task)."""
        ...

    async def catch_up(self, sub: Subscription) -> None:
        """Read the next page of the log for ``sub``, which resumed (it gets
        :meth:`Subscription.caught_up`)."""
        ...

    def release(self, sub: Subscription) -> None:
        """Called by a subscription that ended."""
        ...


class Subscription:
    """Changes of one tenant's watched tasks, in order, each once; see :meth:`get`."""

    def __init__(self, hub: Feed, tenant_id: str, *, after: int, live: bool) -> None:
        self.tenant_id = tenant_id
        self._hub = hub
        self._cursor = after  # the last change handed out (or passed over)
        self._live = live
        self._check_history = not live  # a resume first checks retention
        self.epoch = 0  # +1 per resume: a log page read for an older position is dropped
        self._queue: deque[Change | Reset] = deque()
        self._wake = asyncio.Event()
        self._tasks: set[str] | None = set()  # None: every task of the tenant
        self.reason: DropReason | None = None

    @property
    def position(self) -> int:
        """The tenant change number this subscription has got to (for resuming)."""
        return self._cursor

    def watch(self, task_ids: Iterable[str]) -> None:
        """Also deliver changes of these tasks (the caller checked they are the tenant's)."""
        if self._tasks is not None and self.reason is None:
            added = set(task_ids) - self._tasks
            self._tasks.update(added)
            self._hub.index(self, added)

    def watch_all(self) -> None:
        """Deliver changes of every task of the tenant."""
        if self._tasks is not None and self.reason is None:
            self._hub.unindex(self, self._tasks)
            self._tasks = None
            self._hub.index(self, None)

    def unwatch(self, task_ids: Iterable[str]) -> None:
        """Stop delivering these tasks' changes (no-op while watching all)."""
        if self._tasks is not None and self.reason is None:
            removed = self._tasks.intersection(task_ids)
            self._tasks.difference_update(removed)
            self._hub.unindex(self, removed)

    @property
    def watching(self) -> frozenset[str] | None:
        """The task ids watched; None while watching every task."""
        return None if self._tasks is None else frozenset(self._tasks)

    def watches(self, task_id: str) -> bool:
        return self._tasks is None or task_id in self._tasks

    def resume(self, after: int) -> None:
        """Replay from the log every change numbered above ``after``, then go on live."""
        self._cursor, self._live, self._check_history = after, False, True
        self.epoch += 1
        self._queue.clear()
        self._wake.set()

    def close(self) -> None:
        """End the subscription (idempotent); :meth:`get` returns None from now on."""
        self._drop("closed")

    async def get(self) -> Change | Reset | None:
        """The next change of a watched task, or a :class:`Reset`; None once ended
        (``reason`` says why)."""
        while self.reason is None:
            if self._queue:
                item = self._queue.popleft()
                if isinstance(item, Reset):
                    return item
                if item.seq <= self._cursor:
                    continue  # seen before a resume, or while catching up
                self._cursor = item.seq
                if self.watches(item.task_id):
                    return item
            elif not self._live:
                await self._hub.catch_up(self)
            else:
                self._wake.clear()
                await self._wake.wait()
        return None

    def __aiter__(self) -> AsyncIterator[Change | Reset]:
        return self._items()

    async def _items(self) -> AsyncIterator[Change | Reset]:
        while (item := await self.get()) is not None:
            yield item

    # The hub's side
    @property
    def live(self) -> bool:
        return self._live

    def offer(self, change: Change, queue_size: int) -> None:
        """A live change from the hub: queued, or the subscription dropped if full."""
        if not self._live or self.reason is not None or not self.watches(change.task_id):
            return
        if len(self._queue) >= queue_size:
            self._drop("slow_consumer")
            return
        self._queue.append(change)
        self._wake.set()

    def caught_up(self, items: list[Change | Reset], *, live: bool, epoch: int) -> None:
        """A page read from the log (and a reset, if history was missing)."""
        if epoch != self.epoch or self.reason is not None:
            return
        self._check_history = False
        for item in items:
            if isinstance(item, Reset):
                self._cursor = item.resume_after
            self._queue.append(item)
        self._live = live

    @property
    def checks_history(self) -> bool:
        return self._check_history

    def _drop(self, reason: DropReason) -> None:
        if self.reason is None:
            self.reason = reason
            self._queue.clear()
            self._wake.set()
            self._hub.release(self)
