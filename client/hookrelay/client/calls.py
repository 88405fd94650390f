"""The API's one-request calls as plans (:mod:`hookrelay.client.ops`).

A write whose answer was lost is sent again (``retry="safe"``) only where that cannot
do it twice: a submit carries its Idempotency-Key; a transition sent again meets a
409 showing the state the first send made, which is then its answer.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

from hookrelay.client.errors import Conflict, NotFound
from hookrelay.client.ops import Call, Emit, Plan, Reply, Send
from hookrelay.models import (
    Attempt,
    DeadLetter,
    Notifications,
    NotificationType,
    PortalLink,
    Task,
    TerminalStatus,
    TestEvent,
)


def task_path(task_id: str, tail: str = "") -> str:
    return f"/v1/tasks/{quote(task_id, safe='')}{tail}"


def task_of(reply: Reply) -> Task:
    return Task.from_json(reply.response.json())


def timestamp(value: datetime | str, name: str = "updated_after") -> str:
    """An ``updatedAfter`` (``since``, ``until``) value; a datetime must carry its time zone."""
    if isinstance(value, str):
        return value
    if value.tzinfo is None:
        raise ValueError(f"{name} needs a time zone (e.g. datetime.now(UTC))")
    return value.isoformat()


class TaskCache:
    """The last ETag and task of the most recently read tasks, for ``If-None-Match``."""

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._items: OrderedDict[str, tuple[str, Task]] = OrderedDict()
        self._lock = threading.Lock()  # a sync Client may be shared by threads

    def get(self, task_id: str) -> tuple[str, Task] | None:
        with self._lock:
            found = self._items.get(task_id)
            if found is not None:
                self._items.move_to_end(task_id)
            return found

    def put(self, task_id: str, etag: str | None, task: Task) -> None:
        if etag is None:
            return
        with self._lock:
            self._items[task_id] = (etag, task)
            self._items.move_to_end(task_id)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


def submit(
    task_type: str,
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
) -> Plan[Task]:
    body: dict[str, Any] = {"type": task_type, "callbackUrl": callback_url}
    optional = {
        "input": input,
        "metadata": metadata,
        "timeoutSeconds": timeout_seconds,
        "heartbeatTimeoutSeconds": heartbeat_timeout_seconds,
        "onTimeout": on_timeout,
        "callbackHeaders": None if callback_headers is None else dict(callback_headers),
        "orderingKey": ordering_key,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    # One key for every send of this submit: the server answers a repeat with the
    # task the first one made, so a lost answer never makes a second task.
    key = idempotency_key or f"hrc-{uuid.uuid4()}"
    headers = {"Idempotency-Key": key}
    # The caller's W3C trace context: every attempt of the task's webhook continues it.
    if traceparent:
        headers["traceparent"] = traceparent
        if tracestate:
            headers["tracestate"] = tracestate
    reply = yield Send(Call("POST", "/v1/tasks", body=body, headers=headers))
    return task_of(reply)


def get(task_id: str, cache: TaskCache) -> Plan[Task]:
    cached = cache.get(task_id)
    headers = {"If-None-Match": cached[0]} if cached else {}
    reply = yield Send(Call("GET", task_path(task_id), headers=headers))
    if reply.response.status_code == 304 and cached is not None:
        return cached[1]
    task = task_of(reply)
    cache.put(task_id, reply.response.headers.get("etag"), task)
    return task


def page(
    status: str | None, updated_after: datetime | str | None, cursor: str | None, limit: int
) -> Plan[tuple[list[Task], str | None]]:
    """One page of ``GET /v1/tasks`` and its ``nextCursor``."""
    params = {"limit": str(limit)}
    if status is not None:
        params["status"] = status
    if updated_after is not None:
        params["updatedAfter"] = timestamp(updated_after)
    if cursor is not None:
        params["cursor"] = cursor
    reply = yield Send(Call("GET", "/v1/tasks", params=params))
    body = reply.response.json()
    return [Task.from_json(t) for t in body["data"]], body.get("nextCursor")


def tasks(status: str | None, updated_after: datetime | str | None, limit: int) -> Plan[None]:
    """Every task of every page, in (updatedAt, id) order."""
    cursor: str | None = None
    while True:
        found, cursor = yield from page(status, updated_after, cursor, limit)
        for task in found:
            yield Emit(task)
        if cursor is None:
            return


def deliveries(task_id: str) -> Plan[list[Attempt]]:
    reply = yield Send(Call("GET", task_path(task_id, "/deliveries")))
    return [Attempt.from_json(a) for a in reply.response.json()["data"]]


def _transition(call: Call, landed: Callable[[Task], bool]) -> Plan[Task]:
    """``call``; a 409 after more than one send is its answer if ``landed`` says the
    first send made that state (only its answer was lost)."""
    try:
        reply = yield Send(call)
    except Conflict as exc:
        current = exc.task
        if exc.attempts > 1 and current is not None and landed(current):
            return current
        raise
    return task_of(reply)


def redeliver(task_id: str) -> Plan[Task]:
    call = Call("POST", task_path(task_id, "/redeliver"))
    return (
        yield from _transition(
            call, lambda t: t.delivery is not None and t.delivery.status == "pending"
        )
    )


def cancel(task_id: str) -> Plan[Task]:
    call = Call("POST", task_path(task_id, "/cancel"), auth="any")
    return (yield from _transition(call, lambda t: t.status == "cancelled"))


def start(task_id: str) -> Plan[Task]:
    call = Call("POST", task_path(task_id, "/start"), auth="admin")
    return (yield from _transition(call, lambda t: t.status == "running"))


def complete(task_id: str, status: TerminalStatus, result: Any, error: Any) -> Plan[Task]:
    body = {"status": status, "result": result, "error": error}
    call = Call("POST", task_path(task_id, "/complete"), auth="admin", body=body)

    def landed(t: Task) -> bool:
        return (t.status, t.result, t.error) == (status, result, error)

    return (yield from _transition(call, landed))


def progress(task_id: str, percent: float, message: str | None) -> Plan[Task]:
    # Sent again, an equal percent is a heartbeat: harmless.
    body: dict[str, Any] = {"percent": percent, "message": message}
    reply = yield Send(Call("POST", task_path(task_id, "/progress"), auth="admin", body=body))
    return task_of(reply)


def test_event(callback_url: str) -> Plan[TestEvent]:
    # Each send is a new ping: sent again only when the first certainly never left.
    call = Call("POST", "/v1/test-events", body={"callbackUrl": callback_url}, retry="unsent")
    reply = yield Send(call)
    return TestEvent.from_json(reply.response.json())


def get_test_event(event_id: str) -> Plan[TestEvent]:
    reply = yield Send(Call("GET", f"/v1/test-events/{quote(event_id, safe='')}"))
    return TestEvent.from_json(reply.response.json())


def public_keys() -> Plan[list[str]]:
    """The tenant's ``whpk_`` keys that sign now (``GET /v1/signing-keys``)."""
    reply = yield Send(Call("GET", "/v1/signing-keys"))
    return [k["publicKey"] for k in reply.response.json()["data"] if k.get("publicKey")]


def portal_link(read_only: bool) -> Plan[PortalLink]:
    """A single-use link into the partner portal. Sent again if the answer is lost:
    the first link, never handed on, just expires."""
    reply = yield Send(Call("POST", "/v1/portal-links", body={"readOnly": read_only}))
    return PortalLink.from_json(reply.response.json())


# -- dead letters and notifications ------------------------------------------------------


def letter_path(event_id: str, tail: str = "") -> str:
    return f"/v1/dead-letters/{quote(event_id, safe='')}{tail}"


def _letter_filter(
    since: datetime | str | None, until: datetime | str | None, event_type: str | None
) -> dict[str, str]:
    params: dict[str, str] = {}
    if since is not None:
        params["since"] = timestamp(since, "since")
    if until is not None:
        params["until"] = timestamp(until, "until")
    if event_type is not None:
        params["eventType"] = event_type
    return params


def dead_letters(
    since: datetime | str | None, until: datetime | str | None, event_type: str | None, limit: int
) -> Plan[None]:
    """Every dead letter of the tenant's matching the filters, page after page."""
    cursor: str | None = None
    while True:
        params = {**_letter_filter(since, until, event_type), "limit": str(limit)}
        if cursor is not None:
            params["cursor"] = cursor
        reply = yield Send(Call("GET", "/v1/dead-letters", params=params))
        body = reply.response.json()
        for letter in body["data"]:
            yield Emit(DeadLetter.from_json(letter))
        if (cursor := body.get("nextCursor")) is None:
            return


def dead_letter(event_id: str) -> Plan[DeadLetter]:
    reply = yield Send(Call("GET", letter_path(event_id)))
    return DeadLetter.from_json(reply.response.json())


def replay_one(event_id: str, reason: str | None) -> Plan[int]:
    """Replay one letter; 1. A 409 "already replayed" after more than one send means the
    first send replayed it (only its answer was lost)."""
    body = {"reason": reason} if reason is not None else None
    try:
        yield Send(Call("POST", letter_path(event_id, "/replay"), body=body))
    except Conflict as exc:
        if exc.attempts > 1 and exc.code == "already_replayed":
            return 1
        raise
    return 1


def replay_matching(
    since: datetime | str | None,
    until: datetime | str | None,
    event_type: str | None,
    dry_run: bool,
    reason: str | None,
) -> Plan[int]:
    """How many letters a bulk replay took (or, with ``dry_run``, would take)."""
    params = _letter_filter(since, until, event_type)
    if dry_run:
        params["dryRun"] = "true"
    body = {"reason": reason} if reason is not None else None
    # A dry run only counts: safe to send again. A replay sent again would replay the
    # letters that died again meanwhile: only when the first certainly never arrived.
    call = Call(
        "POST", "/v1/dead-letters/replay", body=body, params=params,
        retry="safe" if dry_run else "unsent",
    )  # fmt: skip
    reply = yield Send(call)
    return int(reply.response.json()["replayed"])


def notifications() -> Plan[Notifications | None]:
    """The tenant's notification settings; None while none are set."""
    try:
        reply = yield Send(Call("GET", "/v1/notifications"))
    except NotFound:
        return None
    return Notifications.from_json(reply.response.json())


def set_notifications(url: str, events: Sequence[NotificationType] | None) -> Plan[Notifications]:
    # A PUT: sent again, it sets the same thing.
    body: dict[str, Any] = {"url": url}
    if events is not None:
        body["events"] = list(events)
    reply = yield Send(Call("PUT", "/v1/notifications", body=body))
    return Notifications.from_json(reply.response.json())


def delete_notifications() -> Plan[None]:
    # 204 whether or not any were set: sent again, harmless.
    yield Send(Call("DELETE", "/v1/notifications"))
