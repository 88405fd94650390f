"""Typed rows of the domain and their JSON shapes (camelCase, as the API shows them).

The shapes are msgspec Structs: the API encodes them as they are, webhooks carry
:class:`TaskData`, and ``/openapi.json`` takes its schemas from the same declarations
(``hookrelay.service.api.shapes`` declares the rest of the API's shapes beside them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, NewType, get_args

import msgspec
from msgspec import UNSET, Meta, UnsetType

# Ids are plain text in the database; the types keep a task id from being
# passed where an event id is meant.
TaskId = NewType("TaskId", str)
EventId = NewType("EventId", str)
TenantId = NewType("TenantId", str)

# Every status set is written here once; the SQL receives them as $n::text[]
# and tests/test_models.py compares them with the schema's CHECK constraints.
LiveStatus = Literal["queued", "running"]
TerminalStatus = Literal["succeeded", "failed", "cancelled", "timed_out"]
TaskStatus = Literal[LiveStatus, TerminalStatus]
DeliveryStatus = Literal["none", "pending", "delivered", "dead"]
Outcome = Literal["delivered", "retry", "dead"]
CircuitState = Literal["closed", "open", "half-open"]
AuditAction = Literal[
    "replay",
    "bulk_replay",
    "close_circuit",
    "redeliver",
    "set_notifications",
    "delete_notifications",
    "test_notification",
    "rotate_secret",
    "test_event",
]
# Why a delivery failed, as an operator sorts it (derived from the stored error).
ErrorClass = Literal["timeout", "dns", "tls", "connect", "blocked", "http_4xx", "http_5xx", "other"]
# Which signatures a tenant's webhooks carry, and the kind of one stored key.
SignatureScheme = Literal["v1", "v1a", "both"]
KeyScheme = Literal["v1", "v1a"]
# Where a test event (POST /v1/test-events) is: it has no task to summarise it.
TestEventStatus = Literal["pending", "delivered", "dead"]

LIVE_STATUSES: tuple[LiveStatus, ...] = get_args(LiveStatus)
TERMINAL_STATUSES: tuple[TerminalStatus, ...] = get_args(TerminalStatus)
TERMINAL: frozenset[str] = frozenset(TERMINAL_STATUSES)
ALL_STATUSES: frozenset[str] = frozenset(get_args(TaskStatus))


def iso(ts: datetime | None) -> str | None:
    """ISO-8601 in UTC with a ``Z``, or None."""
    if ts is None:
        return None
    return ts.isoformat().replace("+00:00", "Z")


MAX_PROGRESS_MESSAGE = 1000
# The API's times: ISO-8601 in UTC with a Z, as msgspec encodes an aware datetime.
Time = Annotated[datetime, Meta(tz=True)]


class Progress(msgspec.Struct, rename="camel"):
    """The last progress report of a running task (`POST /v1/tasks/{id}/progress`)."""

    percent: Annotated[float, Meta(ge=0, le=100)]
    message: Annotated[str, Meta(max_length=MAX_PROGRESS_MESSAGE)] | None
    updated_at: Time


class OnTimeout(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """What is written onto the task if it times out: the default path."""

    result: Any | UnsetType = UNSET
    error: Any | UnsetType = UNSET


class TaskData(msgspec.Struct, rename="camel"):
    """A task as a webhook's `data` shows it: the resource without `delivery`."""

    id: TaskId
    type: str
    status: TaskStatus
    input: Any
    result: Any
    error: Any
    callback_url: str
    metadata: dict[str, Any] | None
    created_at: Time
    updated_at: Time
    completed_at: Time | None
    timeout_at: Time | None
    heartbeat_timeout_s: float | None = msgspec.field(name="heartbeatTimeoutSeconds")
    on_timeout: OnTimeout | None
    progress: Progress | None
    version: Annotated[int, Meta(description="+1 per transition and progress report")]
    callback_headers: Annotated[
        list[str],
        Meta(
            description="the names of the callback headers each attempt sends (values never shown)"
        ),
    ]
    ordering_key: Annotated[
        str | None,
        Meta(
            description="webhooks of the tenant's tasks with this key are delivered one at a "
            "time, in the order their events commit"
        ),
    ]


class DeliverySummary(msgspec.Struct, rename="camel"):
    """Where the task's terminal event is: `none` until there is one."""

    event_id: EventId | None
    status: DeliveryStatus
    attempts: int
    last_attempt_at: Time | None
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: Time | None
    delivered_at: Time | None


class TaskResource(TaskData):
    """A task, as every route that answers with one shows it."""

    delivery: DeliverySummary


class AttemptResource(msgspec.Struct, rename="camel"):
    """One delivery attempt of an event."""

    event_id: EventId
    number: int
    attempted_at: Time
    duration_ms: float
    outcome: Outcome
    status_code: int | None
    error: str | None
    response_prefix: str | None


# Task fields read from tables of their own, which not every statement joins.
_JOINED = ("callback_header_names", "ordering_key")


@dataclass(frozen=True, slots=True)
class Task:
    id: TaskId
    tenant_id: TenantId
    type: str
    status: TaskStatus
    input: Any
    result: Any
    error: Any
    callback_url: str
    metadata: Any
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    timeout_at: datetime | None
    version: int
    event_id: EventId | None
    delivery_status: DeliveryStatus
    delivery_attempts: int
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    progress: Any = None  # {percent, message, updatedAt} of the last report
    heartbeat_timeout_s: float | None = None
    heartbeat_at: datetime | None = None
    heartbeat_due_at: datetime | None = None
    on_timeout: Any = None  # {result?, error?} written onto the task if it times out
    # The names of its callback headers (their values are sealed, never loaded here).
    callback_header_names: list[str] | None = None
    ordering_key: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Task:
        values = {name: row[name] for name in cls.__slots__ if name not in _JOINED}
        # Read from callback_headers (0019) and task_ordering_keys (0024) by the
        # statements that show a task; the sweeper's and ops' own reads leave them out.
        joined: dict[str, Any] = {name: row.get(name) for name in _JOINED}
        return cls(**values, **joined)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def etag(self) -> str:
        # version moves on every transition and delivery-summary change bumps
        # updated_at, so the pair identifies one representation.
        return f'"{self.version}-{int(self.updated_at.timestamp() * 1_000_000)}"'

    def resource(self) -> TaskResource:
        """The task as the API shows it: its :meth:`event_data` and its delivery summary."""
        return TaskResource(
            **self._data(),
            delivery=DeliverySummary(
                event_id=self.event_id,
                status=self.delivery_status,
                attempts=self.delivery_attempts,
                last_attempt_at=self.last_attempt_at,
                last_status_code=self.last_status_code,
                last_error=self.last_error,
                next_attempt_at=self.next_attempt_at,
                delivered_at=self.delivered_at,
            ),
        )

    def event_data(self) -> TaskData:
        """The task as a webhook's ``data`` shows it: no ``delivery`` block, which
        changes with every attempt while the body is fixed when it is committed."""
        return TaskData(**self._data())

    def _data(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "status": self.status,
            "input": self.input,
            "result": self.result,
            "error": self.error,
            "callback_url": self.callback_url,
            "metadata": self.metadata,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "completed_at": self.completed_at,
            "timeout_at": self.timeout_at,
            "heartbeat_timeout_s": self.heartbeat_timeout_s,
            "on_timeout": self.on_timeout,
            "progress": self.progress,
            "version": self.version,
            "callback_headers": list(self.callback_header_names or ()),
            "ordering_key": self.ordering_key,
        }

    def to_resource(self) -> dict[str, Any]:
        """:meth:`resource` as plain JSON values, for callers that edit or embed it."""
        return msgspec.to_builtins(self.resource())  # type: ignore[no-any-return]

    def to_event_data(self) -> dict[str, Any]:
        """:meth:`event_data` as plain JSON values (the stored webhook body is built from it)."""
        return msgspec.to_builtins(self.event_data())  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One row of a task's delivery log."""

    event_id: EventId
    number: int
    attempted_at: datetime
    duration_ms: float
    outcome: Outcome
    status_code: int | None
    error: str | None
    response_prefix: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Attempt:
        return cls(**{name: row[name] for name in cls.__slots__})

    def resource(self) -> AttemptResource:
        return AttemptResource(
            event_id=self.event_id,
            number=self.number,
            attempted_at=self.attempted_at,
            duration_ms=round(self.duration_ms, 3),
            outcome=self.outcome,
            status_code=self.status_code,
            error=self.error,
            response_prefix=self.response_prefix,
        )
