"""``Client``: the API with blocking calls (httpx.Client), for scripts, workers and threads."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx

from hookrelay.client import calls, following, retry, waiting
from hookrelay.client.backoff import SyncClock, SystemClock
from hookrelay.client.base import Settings
from hookrelay.client.sync_driver import SyncDriver
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


class Client:
    """hookrelay's API for one tenant (``api_key``) and/or an executor (``admin_token``).

    Use it as a context manager, or call :meth:`close`. Every method documents what it
    does when the connection is lost.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        admin_token: str | None = None,
        timeout: float = 10.0,
        attempts: int = retry.DEFAULT_ATTEMPTS,
        transport: httpx.BaseTransport | None = None,
        clock: SyncClock | None = None,
    ) -> None:
        settings = Settings(api_key, admin_token, timeout, attempts)
        self._http = httpx.Client(base_url=base_url, timeout=timeout, transport=transport)
        self._clock: SyncClock = clock or SystemClock()
        self._driver = SyncDriver(self._http, settings, self._clock)
        self._cache = calls.TaskCache()

    def __repr__(self) -> str:
        return f"Client({str(self._http.base_url)!r})"  # never the credentials

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- partner ----------------------------------------------------------------------

    def submit(
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
        return self._driver.run(plan)

    def get(self, task_id: str) -> Task:
        """The task; unchanged since the last read (304), the task read then. Retried."""
        return self._driver.run(calls.get(task_id, self._cache))

    def wait(self, task_id: str, timeout: float = 60.0) -> Task:
        """The task once terminal; :class:`WaitTimeout` (with the last state) after
        ``timeout`` s. Lost connection: polls again with backoff until the timeout."""
        return self._driver.run(waiting.wait(task_id, timeout, self._clock, self._cache))

    def follow(
        self, task_id: str, *, last_event_id: int | None = None, give_up_after: float | None = 300
    ) -> Iterator[following.TaskEvent]:
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
    ) -> Iterator[following.TaskEvent]:
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
    ) -> Iterator[Task]:
        """Every matching task, page after page (``nextCursor``). Each page retried."""
        return self._driver.iterate(calls.tasks(status, updated_after, page_size))

    def deliveries(self, task_id: str) -> list[Attempt]:
        """The attempt log of the task's webhook. Retried."""
        return self._driver.run(calls.deliveries(task_id))

    def redeliver(self, task_id: str) -> Task:
        """Send the terminal webhook again (same event id). Lost answer: sent again; the
        409 "already pending" that the first send caused is taken as its answer."""
        return self._driver.run(calls.redeliver(task_id))

    def cancel(self, task_id: str) -> Task:
        """Cancel the task. Lost answer: sent again; a 409 showing it cancelled is the answer."""
        return self._driver.run(calls.cancel(task_id))

    def test_event(self, callback_url: str) -> TestEvent:
        """Send a signed ping to ``callback_url``. Sent again only if the request never
        left (a lost answer raises :class:`TransportError`: a resend is a second ping)."""
        return self._driver.run(calls.test_event(callback_url))

    def get_test_event(self, event_id: str) -> TestEvent:
        """A test event with its attempts. Retried."""
        return self._driver.run(calls.get_test_event(event_id))

    def public_keys(self) -> list[str]:
        """The ``whpk_`` keys that sign the tenant's ``v1a`` webhooks now. Retried."""
        return self._driver.run(calls.public_keys())

    def portal_link(self, read_only: bool = False) -> PortalLink:
        """A single-use link into the partner portal (``/portal``) for this tenant: it
        opens once, within 15 minutes, a session of at most 12 hours (view only with
        ``read_only``). Retried: a link lost on the way just expires."""
        return self._driver.run(calls.portal_link(read_only))

    # -- the tenant's dead letters and notifications ------------------------------------

    def dead_letters(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        event_type: str | None = None,
        page_size: int = 100,
    ) -> Iterator[DeadLetter]:
        """The tenant's dead letters (failed in [since, until)), page after page. Each
        page retried."""
        return self._driver.iterate(calls.dead_letters(since, until, event_type, page_size))

    def dead_letter(self, event_id: str) -> DeadLetter:
        """One of the tenant's dead letters with its ``attempt_history``; another
        tenant's raises :class:`NotFound`. Retried."""
        return self._driver.run(calls.dead_letter(event_id))

    def replay(
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
            return self._driver.run(calls.replay_one(event_id, reason))
        plan = calls.replay_matching(since, until, event_type, dry_run, reason)
        return self._driver.run(plan)

    def notifications(self) -> Notifications | None:
        """Where the tenant is told about its delivery trouble; None if nowhere. Retried."""
        return self._driver.run(calls.notifications())

    def set_notifications(
        self, url: str, events: Sequence[NotificationType] | None = None
    ) -> Notifications:
        """Be told at ``url`` about ``events`` (all three when None). Retried (a PUT)."""
        return self._driver.run(calls.set_notifications(url, events))

    def delete_notifications(self) -> None:
        """Be told nothing more. Retried (harmless when none are set)."""
        self._driver.run(calls.delete_notifications())

    # -- executor (admin token) -------------------------------------------------------

    def start(self, task_id: str) -> Task:
        """queued → running. Lost answer: sent again; a 409 showing it running is the answer."""
        return self._driver.run(calls.start(task_id))

    def complete(
        self, task_id: str, status: TerminalStatus, *, result: Any = None, error: Any = None
    ) -> Task:
        """→ terminal ``status``. Lost answer: sent again; a 409 showing this very outcome
        is the answer (any other terminal state raises :class:`Conflict`)."""
        return self._driver.run(calls.complete(task_id, status, result, error))

    def progress(self, task_id: str, percent: float, message: str | None = None) -> Task:
        """Report progress (also the heartbeat). Lost answer: sent again (an equal
        percent is a plain heartbeat)."""
        return self._driver.run(calls.progress(task_id, percent, message))
