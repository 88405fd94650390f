"""``AsyncClient``: the API with ``await`` (httpx.AsyncClient), for asyncio and trio code.

Every call does what :class:`hookrelay.client.Client`'s does, by the same plan; only
the I/O differs. Streams and listings are async iterators: leave one early through
``contextlib.aclosing`` so its connection closes at once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx

from hookrelay.client import calls, following, retry, waiting
from hookrelay.client.aio_driver import AsyncDriver
from hookrelay.client.backoff import AsyncClock, AsyncSystemClock
from hookrelay.client.base import Settings
from hookrelay.models import (
    Attempt,
    DeadLetter,
    Notifications,
    NotificationType,
    PortalLink,
    Task,
    TaskStatus,
    TerminalStatus,
    TestEvent,
)


class AsyncClient:
    """hookrelay's API for one tenant (``api_key``) and/or an executor (``admin_token``).

    ``async with AsyncClient(...) as client:``, or call :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        admin_token: str | None = None,
        timeout: float = 10.0,
        attempts: int = retry.DEFAULT_ATTEMPTS,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: AsyncClock | None = None,
    ) -> None:
        settings = Settings(api_key, admin_token, timeout, attempts)
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout, transport=transport)
        self._clock: AsyncClock = clock or AsyncSystemClock()
        self._driver = AsyncDriver(self._http, settings, self._clock)
        self._cache = calls.TaskCache()

    def __repr__(self) -> str:
        return f"AsyncClient({str(self._http.base_url)!r})"  # never the credentials

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- partner ----------------------------------------------------------------------

    async def submit(
        self,
        type: str,
        *,
        callback_url: str,
        input: Any = None,
        idempotency_key: str | None = None,
        metadata: Any = None,
        timeout_seconds: float | None = None,
        heartbeat_timeout_seconds: float | None = None,
        on_timeout: Any = None,
        callback_headers: Mapping[str, str] | None = None,
        ordering_key: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Task:
        """Submit a task. Lost answer: sent again with the same Idempotency-Key (one
        generated when none is given), so the server answers with the task it made.
        ``callback_headers`` go with every attempt of its webhook (e.g. a receiver's
        ``x-api-key``); the server keeps their values encrypted and shows only names.
        ``ordering_key``: webhooks of your tasks with the same key are delivered one at
        a time, in the order they finish.
        ``traceparent``/``tracestate`` (W3C): the trace every attempt of its webhook
        continues, e.g. ``TraceContextTextMapPropagator().inject(carrier)``'s."""
        plan = calls.submit(
            type,
            callback_url=callback_url,
            input=input,
            idempotency_key=idempotency_key,
            metadata=metadata,
            timeout_seconds=timeout_seconds,
            heartbeat_timeout_seconds=heartbeat_timeout_seconds,
            on_timeout=on_timeout,
            callback_headers=callback_headers,
            ordering_key=ordering_key,
            traceparent=traceparent,
            tracestate=tracestate,
        )
        return await self._driver.run(plan)

    async def get(self, task_id: str) -> Task:
        """The task; unchanged since the last read (304), the task read then. Retried."""
        return await self._driver.run(calls.get(task_id, self._cache))

    async def wait(self, task_id: str, timeout: float = 60.0) -> Task:
        """The task once terminal; :class:`WaitTimeout` (with the last state) after
        ``timeout`` s. Lost connection: polls again with backoff until the timeout."""
        return await self._driver.run(waiting.wait(task_id, timeout, self._clock, self._cache))

    def follow(
        self, task_id: str, *, last_event_id: int | None = None, give_up_after: float | None = 300
    ) -> AsyncGenerator[following.TaskEvent, None]:
        """Each new version of the task until the terminal one. Lost connection:
        resumes from the last version; gives up after ``give_up_after`` s of failures."""
        return self._driver.iterate(
            following.follow(task_id, self._clock, give_up_after, last_event_id)
        )

    def follow_all(
        self,
        *,
        last_event_id: int | None = None,
        updated_after: datetime | None = None,
        give_up_after: float | None = 300,
    ) -> AsyncGenerator[following.TaskEvent, None]:
        """Each new version of every task of the tenant, without end. Lost connection:
        resumes from the last sequence; after a reset, reconciles through the listing."""
        plan = following.follow_all(self._clock, give_up_after, last_event_id, updated_after)
        return self._driver.iterate(plan)

    def tasks(
        self,
        *,
        status: TaskStatus | None = None,
        updated_after: datetime | str | None = None,
        page_size: int = 100,
    ) -> AsyncGenerator[Task, None]:
        """Every matching task, page after page (``nextCursor``). Each page retried."""
        return self._driver.iterate(calls.tasks(status, updated_after, page_size))

    async def deliveries(self, task_id: str) -> list[Attempt]:
        """The attempt log of the task's webhook. Retried."""
        return await self._driver.run(calls.deliveries(task_id))

    async def redeliver(self, task_id: str) -> Task:
        """Send the terminal webhook again (same event id). Lost answer: sent again; the
        409 "already pending" that the first send caused is taken as its answer."""
        return await self._driver.run(calls.redeliver(task_id))

    async def cancel(self, task_id: str) -> Task:
        """Cancel the task. Lost answer: sent again; a 409 showing it cancelled is the answer."""
        return await self._driver.run(calls.cancel(task_id))

    async def test_event(self, callback_url: str) -> TestEvent:
        """Send a signed ping to ``callback_url``. Sent again only if the request never
        left (a lost answer raises :class:`TransportError`: a resend is a second ping)."""
        return await self._driver.run(calls.test_event(callback_url))

    async def get_test_event(self, event_id: str) -> TestEvent:
        """A test event with its attempts. Retried."""
        return await self._driver.run(calls.get_test_event(event_id))

    async def public_keys(self) -> list[str]:
        """The ``whpk_`` keys that sign the tenant's ``v1a`` webhooks now. Retried."""
        return await self._driver.run(calls.public_keys())

    async def portal_link(self, read_only: bool = False) -> PortalLink:
        """A single-use link into the partner portal (``/portal``) for this tenant: it
        opens once, within 15 minutes, a session of at most 12 hours (view only with
        ``read_only``). Retried: a link lost on the way just expires."""
        return await self._driver.run(calls.portal_link(read_only))

    # -- the tenant's dead letters and notifications ------------------------------------

    def dead_letters(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        event_type: str | None = None,
        page_size: int = 100,
    ) -> AsyncGenerator[DeadLetter, None]:
        """The tenant's dead letters (failed in [since, until)), page after page. Each
        page retried."""
        return self._driver.iterate(calls.dead_letters(since, until, event_type, page_size))

    async def dead_letter(self, event_id: str) -> DeadLetter:
        """One of the tenant's dead letters with its ``attempt_history``; another
        tenant's raises :class:`NotFound`. Retried."""
        return await self._driver.run(calls.dead_letter(event_id))

    async def replay(
        self,
        event_id: str | None = None,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        event_type: str | None = None,
        dry_run: bool = False,
        reason: str | None = None,
    ) -> int:
        """Back to the outbox, same event id and body, fresh attempt budget; how many.

        With ``event_id``: that letter (lost answer: sent again; the 409 "already
        replayed" the first send caused is taken as its answer). Without: every letter
        matching the filters; ``dry_run`` only counts them (retried), a replay is sent
        again only if it certainly never arrived. Audited with ``reason``."""
        if event_id is not None:
            return await self._driver.run(calls.replay_one(event_id, reason))
        plan = calls.replay_matching(since, until, event_type, dry_run, reason)
        return await self._driver.run(plan)

    async def notifications(self) -> Notifications | None:
        """Where the tenant is told about its delivery trouble; None if nowhere. Retried."""
        return await self._driver.run(calls.notifications())

    async def set_notifications(
        self, url: str, events: Sequence[NotificationType] | None = None
    ) -> Notifications:
        """Be told at ``url`` about ``events`` (all three when None). Retried (a PUT)."""
        return await self._driver.run(calls.set_notifications(url, events))

    async def delete_notifications(self) -> None:
        """Be told nothing more. Retried (harmless when none are set)."""
        await self._driver.run(calls.delete_notifications())

    # -- executor (admin token) -------------------------------------------------------

    async def start(self, task_id: str) -> Task:
        """queued → running. Lost answer: sent again; a 409 showing it running is the answer."""
        return await self._driver.run(calls.start(task_id))

    async def complete(
        self, task_id: str, status: TerminalStatus, *, result: Any = None, error: Any = None
    ) -> Task:
        """→ terminal ``status``. Lost answer: sent again; a 409 showing this very outcome
        is the answer (any other terminal state raises :class:`Conflict`)."""
        return await self._driver.run(calls.complete(task_id, status, result, error))

    async def progress(self, task_id: str, percent: float, message: str | None = None) -> Task:
        """Report progress (also the heartbeat). Lost answer: sent again (an equal
        percent is a plain heartbeat)."""
        return await self._driver.run(calls.progress(task_id, percent, message))
