"""The task resource as frozen dataclasses, parsed from the API's camelCase JSON.

Shared by the client (answers and streams) and the receiver (a webhook's ``data`` is
the task without its ``delivery`` block). Fields the server adds later are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast, get_args

TaskStatus = Literal["queued", "running", "succeeded", "failed", "cancelled", "timed_out"]
TerminalStatus = Literal["succeeded", "failed", "cancelled", "timed_out"]
DeliveryStatus = Literal["none", "pending", "delivered", "dead"]
TERMINAL: frozenset[str] = frozenset(get_args(TerminalStatus))


def parse_time(raw: object) -> datetime | None:
    """An ISO-8601 time of the API (``...Z``) as an aware datetime, or None."""
    if raw is None:
        return None
    return datetime.fromisoformat(str(raw))


def _time(raw: object) -> datetime:
    parsed = parse_time(raw)
    if parsed is None:
        raise ValueError("a required time is missing")
    return parsed


@dataclass(frozen=True, slots=True)
class Progress:
    """The last progress report of a running task."""

    percent: float
    message: str | None
    updated_at: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Progress:
        return cls(float(data["percent"]), data.get("message"), _time(data["updatedAt"]))


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where the task's terminal webhook is: none yet, pending, delivered or dead."""

    event_id: str | None
    status: DeliveryStatus
    attempts: int
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Delivery:
        return cls(
            event_id=data.get("eventId"),
            status=cast(DeliveryStatus, data["status"]),
            attempts=int(data.get("attempts") or 0),
            last_attempt_at=parse_time(data.get("lastAttemptAt")),
            last_status_code=data.get("lastStatusCode"),
            last_error=data.get("lastError"),
            next_attempt_at=parse_time(data.get("nextAttemptAt")),
            delivered_at=parse_time(data.get("deliveredAt")),
        )


@dataclass(frozen=True, slots=True)
class Task:
    """One task as the API shows it. ``delivery`` is None in a webhook's ``data``."""

    id: str
    type: str
    status: TaskStatus
    version: int
    created_at: datetime
    updated_at: datetime
    input: Any = None
    result: Any = None
    error: Any = None
    callback_url: str | None = None
    metadata: Any = None
    completed_at: datetime | None = None
    timeout_at: datetime | None = None
    progress: Progress | None = None
    delivery: Delivery | None = None
    # The names of its callback headers (the server never shows their values).
    callback_headers: tuple[str, ...] = ()
    # Webhooks of the tenant's tasks with this key go one at a time, in commit order.
    ordering_key: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Task:
        progress, delivery = data.get("progress"), data.get("delivery")
        return cls(
            id=str(data["id"]),
            type=str(data["type"]),
            status=cast(TaskStatus, data["status"]),
            version=int(data["version"]),
            created_at=_time(data["createdAt"]),
            updated_at=_time(data["updatedAt"]),
            input=data.get("input"),
            result=data.get("result"),
            error=data.get("error"),
            callback_url=data.get("callbackUrl"),
            metadata=data.get("metadata"),
            completed_at=parse_time(data.get("completedAt")),
            timeout_at=parse_time(data.get("timeoutAt")),
            progress=Progress.from_json(progress) if progress else None,
            delivery=Delivery.from_json(delivery) if delivery else None,
            callback_headers=tuple(data.get("callbackHeaders") or ()),
            ordering_key=data.get("orderingKey"),
        )

    @property
    def terminal(self) -> bool:
        """Succeeded, failed, cancelled or timed out: it never changes again."""
        return self.status in TERMINAL

    @property
    def is_progress(self) -> bool:
        """Whether this version is a progress report (the report is the last change)."""
        return self.progress is not None and self.progress.updated_at == self.updated_at


@dataclass(frozen=True, slots=True)
class Attempt:
    """One delivery attempt of a webhook, from the attempt log."""

    event_id: str
    number: int
    attempted_at: datetime
    duration_ms: float
    outcome: str
    status_code: int | None
    error: str | None
    response_prefix: str | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Attempt:
        return cls(
            event_id=str(data["eventId"]),
            number=int(data["number"]),
            attempted_at=_time(data["attemptedAt"]),
            duration_ms=float(data["durationMs"]),
            outcome=str(data["outcome"]),
            status_code=data.get("statusCode"),
            error=data.get("error"),
            response_prefix=data.get("responsePrefix"),
        )


@dataclass(frozen=True, slots=True)
class TestEvent:
    """A signed ``ping`` sent to an endpoint (``POST /v1/test-events``) and its attempts."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    event_id: str
    status: Literal["pending", "delivered", "dead"]
    attempts: tuple[Attempt, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TestEvent:
        return cls(
            event_id=str(data["eventId"]),
            status=data["status"],
            attempts=tuple(Attempt.from_json(a) for a in data.get("attempts") or ()),
        )


NotificationType = Literal["delivery.dead", "destination.unhealthy", "destination.recovered"]
NOTIFICATION_TYPES: tuple[NotificationType, ...] = get_args(NotificationType)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A webhook of the tenant's that exhausted its attempts (``/v1/dead-letters``).

    ``attempt_history`` is filled by :meth:`hookrelay.client.Client.dead_letter` only
    (the listing leaves it empty)."""

    event_id: str
    tenant_id: str
    task_id: str | None  # None: a test event or a notification
    event_type: str
    callback_url: str
    created_at: datetime
    failed_at: datetime
    attempts: int
    last_error: str | None
    last_status_code: int | None
    replay_count: int
    replayed_at: datetime | None = None
    replayed_by: str | None = None
    attempt_history: tuple[Attempt, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeadLetter:
        return cls(
            event_id=str(data["eventId"]),
            tenant_id=str(data["tenantId"]),
            task_id=data.get("taskId"),
            event_type=str(data["eventType"]),
            callback_url=str(data["callbackUrl"]),
            created_at=_time(data["createdAt"]),
            failed_at=_time(data["failedAt"]),
            attempts=int(data["attempts"]),
            last_error=data.get("lastError"),
            last_status_code=data.get("lastStatusCode"),
            replay_count=int(data["replayCount"]),
            replayed_at=parse_time(data.get("replayedAt")),
            replayed_by=data.get("replayedBy"),
            attempt_history=tuple(Attempt.from_json(a) for a in data.get("attemptHistory") or ()),
        )


@dataclass(frozen=True, slots=True)
class Notifications:
    """Where the tenant is told about its own delivery trouble (``/v1/notifications``)."""

    url: str
    events: tuple[NotificationType, ...]
    updated_at: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Notifications:
        return cls(
            url=str(data["url"]),
            events=tuple(cast(NotificationType, e) for e in data["events"]),
            updated_at=_time(data["updatedAt"]),
        )


@dataclass(frozen=True, slots=True)
class PortalLink:
    """A single-use link into the partner portal (``POST /v1/portal-links``): hand
    ``url`` to the person who will open it, once, before ``expires_at``."""

    url: str
    expires_at: datetime

    def __repr__(self) -> str:  # the URL carries the link's secret
        return f"PortalLink(url=<secret>, expires_at={self.expires_at!r})"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PortalLink:
        return cls(url=str(data["url"]), expires_at=_time(data["expiresAt"]))
