"""``follow`` and ``follow_all``: the Server-Sent Events streams, resumed across disconnects.

A stream that ends (a server restart) or breaks is opened again with the last id as
``Last-Event-ID``, after the usual backoff; the server then sends every change after
it, so nothing is missed and nothing repeats. An ``event: reset`` says the changes
after that id are gone (past the retention window, or an id the server does not
know): ``follow`` gets the task's current state next; ``follow_all`` reconciles
through ``GET /v1/tasks?updatedAfter=`` before going on. Versions already handed out
are never handed out again, so the reconciliation and the stream cannot repeat each
other.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from hookrelay.client.backoff import Backoff, Clock
from hookrelay.client.calls import page, task_path
from hookrelay.client.errors import ApiError, RateLimited, ServerError, TransportError
from hookrelay.client.ops import Call, Emit, Next, Open, Plan, Sleep
from hookrelay.client.sse import ServerEvent
from hookrelay.models import Task

# The server sends a ping every 15 s of silence: three missed is a dead connection.
READ_TIMEOUT_S = 45.0
# Reconciling starts this long before the last change seen: a change committed late
# (a long transaction) can carry an earlier updatedAt than one seen before it.
RECONCILE_MARGIN = timedelta(minutes=5)
REMEMBERED_TASKS = 100_000


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One new version of a task from a stream.

    ``kind`` is ``"progress"`` for a progress report, else ``"change"``. ``id`` is the
    stream's id (the task's version for ``follow``, the tenant's sequence for
    ``follow_all``): pass the last one back to resume. ``reconciled``: read from the
    listing (or the current state) after a reset, not from the change log; no ``id``.
    """

    task: Task
    kind: Literal["change", "progress"]
    id: int | None
    reconciled: bool = False


def _event(task: Task, event_id: int | None, reconciled: bool = False) -> TaskEvent:
    return TaskEvent(task, "progress" if task.is_progress else "change", event_id, reconciled)


class Versions:
    """The last version handed out per task, for the ``REMEMBERED_TASKS`` seen last."""

    def __init__(self) -> None:
        self._last: OrderedDict[str, int] = OrderedDict()

    def newer(self, task: Task) -> bool:
        """Whether ``task`` is a version not handed out yet; if so, remember it."""
        known = self._last.get(task.id, 0)
        self._last[task.id] = max(known, task.version)
        self._last.move_to_end(task.id)
        if len(self._last) > REMEMBERED_TASKS:
            self._last.popitem(last=False)
        return task.version > known


class Reconnect:
    """The pause before each reconnection, and when to stop trying."""

    def __init__(self, clock: Clock, give_up_after: float | None) -> None:
        self.clock, self.give_up_after = clock, give_up_after
        self.backoff = Backoff()
        self.failing_since: float | None = None

    def opened(self) -> None:
        self.backoff.reset()
        self.failing_since = None

    def failed(self, exc: Exception) -> float:
        """The pause before the next try; re-raises ``exc`` once trying is over."""
        now = self.clock.now()
        if self.failing_since is None:
            self.failing_since = now
        elif self.give_up_after is not None and now - self.failing_since > self.give_up_after:
            raise exc
        return self.backoff.next(exc.retry_after if isinstance(exc, ApiError) else None)


def _stream(path: str, last_id: int | None) -> Call:
    headers = {"Last-Event-ID": str(last_id)} if last_id is not None else {}
    return Call("GET", path, headers=headers, retry="none", read_timeout=READ_TIMEOUT_S)


def _task(event: ServerEvent) -> Task:
    return Task.from_json(json.loads(event.data))


def follow(task_id: str, clock: Clock, give_up_after: float | None, last: int | None) -> Plan[None]:
    """Each new version of one task, until its terminal one."""
    retry = Reconnect(clock, give_up_after)
    after_reset = False
    while True:
        try:
            if (yield Open(_stream(task_path(task_id, "/events"), last))) == 204:
                return  # the final version is the one we have
            retry.opened()
            while (event := (yield Next())) is not None:
                if event.event == "reset":
                    # The current state follows, perhaps at a lower version than
                    # ours (an id the server does not know): take it.
                    resume = int(json.loads(event.data)["resumeAfter"])
                    last = None if last is None else min(last, resume - 1)
                    after_reset = True
                elif event.event == "task":
                    task = _task(event)
                    if last is None or task.version > last:
                        last = task.version
                        yield Emit(_event(task, task.version, after_reset))
                        after_reset = False
                    if task.terminal:
                        return
            pause = retry.failed(TransportError("the stream ended", sent=True))
        except (TransportError, ServerError, RateLimited) as exc:
            pause = retry.failed(exc)
        yield Sleep(pause)


def follow_all(
    clock: Clock,
    give_up_after: float | None,
    position: int | None,
    updated_after: datetime | None,
) -> Plan[None]:
    """Each new version of every task of the tenant, for as long as the caller reads."""
    retry = Reconnect(clock, give_up_after)
    versions = Versions()
    newest = updated_after

    def emit(task: Task, event_id: int | None, reconciled: bool = False) -> Emit | None:
        nonlocal newest
        if not versions.newer(task):
            return None
        newest = task.updated_at if newest is None else max(newest, task.updated_at)
        return Emit(_event(task, event_id, reconciled))

    while True:
        try:
            yield Open(_stream("/v1/events", position))
            retry.opened()
            while (event := (yield Next())) is not None:
                if event.event == "reset":
                    # Hand out what the lost changes changed, then resume after them;
                    # a failure here reconnects from the old position and starts over.
                    since = newest - RECONCILE_MARGIN if newest is not None else None
                    cursor: str | None = None
                    while True:
                        found, cursor = yield from page(None, since, cursor, 100)
                        for task in found:
                            if (out := emit(task, None, True)) is not None:
                                yield out
                        if cursor is None:
                            break
                    position = int(json.loads(event.data)["resumeAfter"])
                elif event.event == "task" and event.id is not None:
                    out = emit(_task(event), int(event.id))
                    position = int(event.id)
                    if out is not None:
                        yield out
                elif event.id is not None:  # the stream's starting position
                    position = int(event.id)
            pause = retry.failed(TransportError("the stream ended", sent=True))
        except (TransportError, ServerError, RateLimited) as exc:
            pause = retry.failed(exc)
        yield Sleep(pause)
