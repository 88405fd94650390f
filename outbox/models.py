"""Typed rows of the domain and their JSON shapes (camelCase, as the API shows them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

TaskStatus = Literal["queued", "running", "succeeded", "failed", "cancelled", "timed_out"]
DeliveryStatus = Literal["none", "pending", "delivered", "dead"]
Outcome = Literal["delivered", "retry", "dead"]

TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "timed_out"})
ALL_STATUSES: frozenset[str] = frozenset(get_args(TaskStatus))


def iso(ts: datetime | None) -> str | None:
    """ISO-8601 in UTC with a ``Z``, or None."""
    if ts is None:
        return None
    return ts.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Task:
    id: str
    tenant_id: str
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
    event_id: str | None
    delivery_status: DeliveryStatus
    delivery_attempts: int
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None

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
        """The task as the API and the webhook's ``data`` show it."""
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
            "version": self.version,
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


@dataclass(frozen=True, slots=True)
class Attempt:
    """One row of a task's delivery log."""

    event_id: str
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
