"""The stream hub: one LISTEN per process fans every tenant's changes out to its subscribers.

The trigger on ``tasks`` queues each change at commit; the hub numbers what is
queued (:meth:`StreamHub.number_soon`: after this process's own commits, on a
writer's ``hookrelay_tasks`` hint, after any gap), which moves it into the log
and sends one ``hookrelay_changes`` notification per batch naming each tenant's
new last number. For a tenant with subscribers, the hub reads everything after
what it last read in one query (notifications arriving meanwhile coalesce into
the next read), renders each change once and hands the same object to every
subscriber. No client holds a database connection or a thread; a pool
connection is taken per read. The log is durable, so a lost LISTEN only means
numbering and reading again from the last position.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import asyncpg

from hookrelay.outbox.store import (
    CHANGES_CHANNEL,
    TASKS_CHANNEL,
    Listener,
    changes,
    parse_changes,
)
from hookrelay.service.api.errors import ApiError, ServiceUnavailable
from hookrelay.service.live.changes import Change, Reset
from hookrelay.service.live.coalesce import Coalesced
from hookrelay.service.live.subscription import Subscription

log = logging.getLogger("hookrelay.streams")
PAGE = 500  # changes per read of the log
RETRY_S = 1.0  # after a failed read
# While it has subscribers, the hub numbers what is queued this often even unasked:
# the floor for writers that neither run in an API process nor send a hint.
TICK_S = 1.0
# Numberings start at least this far apart: at thousands of writes a second, one
# numbering per few writes, not one each; a commit after a quiet spell is numbered
# at once.
NUMBER_SPACING_S = 0.002


class TooManyStreams(ApiError):
    """The tenant has ``HOOKRELAY_STREAMS_PER_TENANT`` streams open on this process."""

    status, code = 429, "too_many_streams"


@dataclass(eq=False)
class _Tenant:
    tenant_id: str
    last_read: int  # the highest change number handed to the live subscribers
    subscribers: set[Subscription] = field(default_factory=set)
    # Who gets a change: those watching every task, and those watching its id. A
    # change of one task costs its own watchers, not every stream of the tenant.
    everything: set[Subscription] = field(default_factory=set)
    watchers: dict[str, set[Subscription]] = field(default_factory=dict)
    dirty: bool = False
    reading: asyncio.Task[None] | None = None


class StreamHub:
    """Subscriptions to tenants' changes; :meth:`start` before use, :meth:`stop` at exit.

    The :class:`~hookrelay.service.live.subscription.Feed` of every subscription it opens.
    """

    def __init__(
        self,
        listener: Listener,
        *,
        per_tenant: int = 500,
        queue_size: int = 1000,
    ) -> None:
        self.per_tenant, self.queue_size = per_tenant, queue_size
        self._tenants: dict[str, _Tenant] = {}
        self._pool: asyncpg.Pool | None = None
        self._closing = False
        self._numbering = Coalesced(
            self._number, name="hookrelay-stream-number", spacing_s=NUMBER_SPACING_S
        )
        self._ticking: asyncio.Task[None] | None = None
        self._wake: tuple[str, str] | None = None  # sent with the next numbering
        # The process's LISTEN: its owner starts it once the hub has its pool.
        self._listener = listener
        self._listener.join(
            {CHANGES_CHANNEL: self._notified, TASKS_CHANNEL: lambda _: self.number_soon()},
            on_gap=self._read_all,
        )

    async def start(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._ticking = asyncio.create_task(self._tick(), name="hookrelay-stream-tick")

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            if self._tenants:
                self.number_soon()

    def end_all(self) -> None:
        """End every subscription (reason ``shutdown``) and refuse new ones: shutdown began."""
        self._closing = True
        for tenant in list(self._tenants.values()):
            for sub in list(tenant.subscribers):
                sub._drop("shutdown")

    async def stop(self) -> None:
        self.end_all()
        await self._numbering.stop()
        if self._ticking is not None:
            self._ticking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticking
        for tenant in list(self._tenants.values()):
            if tenant.reading is not None:
                tenant.reading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await tenant.reading

    def open_count(self, tenant_id: str) -> int:
        tenant = self._tenants.get(tenant_id)
        return len(tenant.subscribers) if tenant else 0

    async def open(self, tenant_id: str, *, after: int | None = None) -> Subscription:
        """A subscription to ``tenant_id``'s changes, watching no task yet.

        ``after`` None: changes committed from now on (every change that commits
        after this returns is delivered). ``after`` N: every change numbered above
        N, replayed from the log first (a :class:`Reset` first if some are gone).
        Raises :class:`TooManyStreams` past the per-tenant cap (429).
        """
        if self._closing:
            raise ServiceUnavailable("shutting down", headers={"Retry-After": "1"})
        tenant = self._tenants.get(tenant_id)
        if tenant is None:
            async with self._pool_().acquire() as conn:
                # Every change committed before this open gets its number first,
                # so "from now on" starts after all of them.
                await changes.number_pending(conn)
                position = await changes.stream_position(conn, tenant_id=tenant_id)
            tenant = self._tenants.get(tenant_id)  # another open may have come first
            if tenant is None:
                tenant = self._tenants[tenant_id] = _Tenant(tenant_id, position.last_seq)
                # Notifications for it were ignored until now: read once anyway.
                self._schedule(tenant)
        if len(tenant.subscribers) >= self.per_tenant:
            raise TooManyStreams(
                f"this tenant has {self.per_tenant} streams open on this server, the most it may",
                headers={"Retry-After": "10"},
            )
        if after is None:
            sub = Subscription(self, tenant_id, after=tenant.last_read, live=True)
        else:
            sub = Subscription(self, tenant_id, after=max(after, 0), live=False)
        tenant.subscribers.add(sub)
        return sub

    def release(self, sub: Subscription) -> None:
        """Called by a subscription that ended; a tenant with none left is forgotten."""
        tenant = self._tenants.get(sub.tenant_id)
        if tenant is not None:
            self.unindex(sub, sub.watching)
            tenant.subscribers.discard(sub)
            if not tenant.subscribers:
                del self._tenants[sub.tenant_id]

    def index(self, sub: Subscription, task_ids: Iterable[str] | None) -> None:
        """``sub`` now watches these tasks (None: every task)."""
        tenant = self._tenants.get(sub.tenant_id)
        if tenant is None:
            return
        if task_ids is None:
            tenant.everything.add(sub)
            return
        for task_id in task_ids:
            tenant.watchers.setdefault(task_id, set()).add(sub)

    def unindex(self, sub: Subscription, task_ids: Iterable[str] | None) -> None:
        """``sub`` no longer watches these tasks (None: no longer every task)."""
        tenant = self._tenants.get(sub.tenant_id)
        if tenant is None:
            return
        if task_ids is None:
            tenant.everything.discard(sub)
            return
        for task_id in task_ids:
            watching = tenant.watchers.get(task_id)
            if watching is not None:
                watching.discard(sub)
                if not watching:
                    del tenant.watchers[task_id]

    async def catch_up(self, sub: Subscription) -> None:
        """Read the next page of the log for a subscription that resumed."""
        tenant = self._tenants.get(sub.tenant_id)
        if tenant is None or sub.reason is not None:
            return
        items: list[Change | Reset] = []
        after, before, epoch = sub.position, tenant.last_read, sub.epoch
        async with self._pool_().acquire() as conn:
            if sub.checks_history:
                position = await changes.stream_position(conn, tenant_id=sub.tenant_id)
                reset = _reset(after, position)
                if reset is not None:
                    items.append(reset)
                    after = reset.resume_after
            page = await changes.changes_after(
                conn, tenant_id=sub.tenant_id, after=after, limit=PAGE
            )
        items.extend(Change.from_logged(c) for c in page)
        last = page[-1].seq if page else after
        # Live only if this read saw everything the hub has handed out: a change
        # the hub read while this query ran may be missing from the page.
        done = len(page) < PAGE and (tenant.last_read == before or last >= tenant.last_read)
        sub.caught_up(items, live=done, epoch=epoch)

    # -- reading the log for live subscribers ------------------------------------------

    def _pool_(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("StreamHub.start() was not called")
        return self._pool

    def number_soon(self, *, wake: tuple[str, str] | None = None) -> None:
        """Changes were committed: number them now, then hand them out.

        Calls made while a numbering runs share the next one, so a burst of
        commits costs one or two numberings, not one each. ``wake``: a NOTIFY
        (channel, payload) to send with that numbering (``Signals``: the
        dispatchers' wake-up), once for all the calls it serves.
        """
        if wake is not None:
            self._wake = wake
        if self._pool is not None:
            self._numbering.poke()

    async def _number(self) -> None:
        # A failure is retried by Coalesced; the queue keeps the changes meanwhile,
        # and the wake-up waits with them.
        wake, self._wake = self._wake, None
        try:
            async with self._pool_().acquire() as conn:
                numbered = await changes.number_pending(conn, wake=wake)
        except BaseException:
            if self._wake is None:
                self._wake = wake
            raise
        # This process's subscribers need not wait for the NOTIFY to come back.
        for n in numbered:
            self._advanced(n.tenant_id, n.last_seq)

    def _advanced(self, tenant_id: str, last_seq: int) -> None:
        tenant = self._tenants.get(tenant_id)
        if tenant is not None and last_seq > tenant.last_read:
            self._schedule(tenant)

    def _notified(self, payload: str) -> None:
        changed = parse_changes(payload)
        if changed is None:  # not ours to parse: look at every tenant
            for tenant in self._tenants.values():
                self._schedule(tenant)
            return
        for c in changed:
            self._advanced(c.tenant_id, c.last_seq)

    def _read_all(self) -> None:
        # Notifications may have been missed: the queue and the log have every change.
        self.number_soon()
        for tenant in self._tenants.values():
            self._schedule(tenant)

    def _schedule(self, tenant: _Tenant) -> None:
        tenant.dirty = True
        if (tenant.reading is None or tenant.reading.done()) and self._pool is not None:
            tenant.reading = asyncio.create_task(self._read(tenant), name="hookrelay-stream-read")

    async def _read(self, tenant: _Tenant) -> None:
        try:
            while tenant.dirty and self._tenants.get(tenant.tenant_id) is tenant:
                tenant.dirty = False
                while True:
                    async with self._pool_().acquire() as conn:
                        page = await changes.changes_after(
                            conn, tenant_id=tenant.tenant_id, after=tenant.last_read, limit=PAGE
                        )
                    for logged in page:
                        change = Change.from_logged(logged)
                        tenant.last_read = change.seq
                        targets = [*tenant.everything, *tenant.watchers.get(change.task_id, ())]
                        for sub in targets:
                            sub.offer(change, self.queue_size)
                    if len(page) < PAGE:
                        break
        except Exception as exc:  # the database is away: read again shortly
            log.warning("reading stream changes of %s failed: %s", tenant.tenant_id, exc)
            if not self._closing:
                asyncio.get_running_loop().call_later(RETRY_S, self._schedule, tenant)


def _reset(after: int, position: changes.StreamPosition) -> Reset | None:
    """A :class:`Reset` if the changes right after ``after`` cannot be replayed."""
    if after > position.last_seq:
        return Reset("unknown_position", after, position.last_seq)
    if after == position.last_seq:
        return None
    oldest = position.oldest_seq
    if oldest is None or oldest > after + 1:
        return Reset("history_expired", after, oldest - 1 if oldest else position.last_seq)
    return None
