"""What a stream hands its consumer: a change of a task, or a reset marker."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from hookrelay.outbox.models import TERMINAL, TaskStatus
from hookrelay.outbox.store.changes import LoggedChange

# Why a subscription ended: its consumer fell behind by more than its queue,
# the process is shutting down, or it was closed by its owner.
DropReason = Literal["slow_consumer", "shutdown", "closed"]


def render(resource: dict[str, Any]) -> bytes:
    """JSON exactly as the API's JSON responses encode it (compact, UTF-8)."""
    return json.dumps(resource, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Change:
    """One committed change of a task, rendered once and shared by every subscriber.

    ``seq`` is the tenant's change number (commit order, no gaps while retained);
    ``task`` the full task resource at ``version``, as ``GET /v1/tasks/{id}``
    shows it (its delivery summary as it was when the change was read);
    ``data`` that resource as JSON bytes.
    """

    tenant_id: str
    seq: int
    task_id: str
    version: int
    status: TaskStatus
    progress: Any
    at: datetime
    task: dict[str, Any]
    data: bytes

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def from_logged(cls, logged: LoggedChange) -> Change:
        task = logged.task
        resource = task.to_resource()
        return cls(
            tenant_id=task.tenant_id,
            seq=logged.seq,
            task_id=task.id,
            version=task.version,
            status=task.status,
            progress=task.progress,
            at=logged.changed_at,
            task=resource,
            data=render(resource),
        )


ResetCode = Literal["history_expired", "unknown_position"]


@dataclass(frozen=True, slots=True)
class Reset:
    """The changes right after ``after`` cannot be replayed; the stream goes on after
    ``resume_after``.

    ``history_expired``: they are older than the retention window. ``unknown_position``:
    ``after`` is beyond the tenant's last change (a number from another database).
    Either way the client should reconcile through ``GET /v1/tasks?updatedAfter=``.
    """

    code: ResetCode
    after: int
    resume_after: int

    def to_resource(self) -> dict[str, Any]:
        what = (
            "are no longer kept (older than the stream retention window)"
            if self.code == "history_expired"
            else "are unknown: that id is beyond this tenant's last change"
        )
        return {
            "code": self.code,
            "message": f"changes after {self.after} {what}; reconcile with "
            "GET /v1/tasks?updatedAfter=<updatedAt of the last change you processed>; "
            f"the stream continues after {self.resume_after}",
            "lastEventId": self.after,
            "resumeAfter": self.resume_after,
        }
