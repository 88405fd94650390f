"""Stand-ins for the unit tests of hookrelay.client: a clock that moves only when the
client sleeps, and the task JSON a server would send."""

from __future__ import annotations

from typing import Any


class FakeClock:
    """Time that moves only when the client sleeps; each pause is kept."""

    def __init__(self) -> None:
        self.t, self.slept = 0.0, list[float]()

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


class AsyncFakeClock(FakeClock):
    async def sleep(self, seconds: float) -> None:  # type: ignore[override]
        super().sleep(seconds)


def task_json(status: str = "queued", version: int = 1, **extra: Any) -> dict[str, Any]:
    """A task resource as ``GET /v1/tasks/{id}`` shows it."""
    return {
        "id": "task_a",
        "type": "t",
        "status": status,
        "version": version,
        "createdAt": "2026-01-01T00:00:00Z",
        "updatedAt": f"2026-01-01T00:00:{version:02d}Z",
        "progress": None,
        "delivery": {"eventId": None, "status": "none", "attempts": 0},
        **extra,
    }
