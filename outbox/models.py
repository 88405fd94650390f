"""Typed rows of the domain and their JSON shapes (camelCase, as the API shows them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NewType, get_args

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
AuditAction = Literal["replay", "bulk_replay", "close_circuit"]
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

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Task:
        return cls(**{name: row[name] for name in cls.__slots__})

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def etag(self) -> str:
        # version moves on every transition and delivery-summary change bumps
        # updated_at, so the pair identifies one representation.
        return f'"{self.version}-{int(self.updated_at.timestamp() * 1_000_000)}"'

    def to_resource(self) -> dict[str, Any]:
        """The task as the API shows it: :meth:`to_event_data` and its delivery summary."""
        return {
            **self.to_event_data(),
            "delivery": {
                "eventId": self.event_id,
                "status": self.delivery_status,
                "attempts": self.delivery_attempts,
                "lastAttemptAt": iso(self.last_attempt_at),
                "lastStatusCode": self.last_status_code,
                "lastError": self.last_error,
                "nextAttemptAt": iso(self.next_attempt_at),
                "deliveredAt": iso(self.delivered_at),
            },
        }

    def to_event_data(self) -> dict[str, Any]:
        """The task as a webhook's ``data`` shows it: no ``delivery`` block, which
        changes with every attempt while the body is fixed when it is committed."""
        return {
            "id": self.id,
            "type": self.type,
            "status": self.status,
            "input": self.input,
            "result": self.result,
            "error": self.error,
            "callbackUrl": self.callback_url,
            "metadata": self.metadata,
            "createdAt": iso(self.created_at),
            "updatedAt": iso(self.updated_at),
            "completedAt": iso(self.completed_at),
            "timeoutAt": iso(self.timeout_at),
            "heartbeatTimeoutSeconds": self.heartbeat_timeout_s,
            "onTimeout": self.on_timeout,
            "progress": self.progress,
            "version": self.version,
        }


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

    def to_resource(self) -> dict[str, Any]:
        return {
            "eventId": self.event_id,
            "number": self.number,
            "attemptedAt": iso(self.attempted_at),
            "durationMs": round(self.duration_ms, 3),
            "outcome": self.outcome,
            "statusCode": self.status_code,
            "error": self.error,
            "responsePrefix": self.response_prefix,
        }
