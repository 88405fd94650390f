"""How long to wait before asking again, and the clock that waits.

One schedule for every retry and every poll: 200 ms, doubling, capped at 2 s, and
never sooner than the server's ``Retry-After`` (itself capped, so a proxy's odd
value cannot park a client for hours). The clocks are swappable so that tests can
check the schedule without sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio

FIRST_S = 0.2
CAP_S = 2.0
MAX_RETRY_AFTER_S = 60.0


def delay(attempt: int, retry_after: float | None = None) -> float:
    """The pause after failed attempt ``attempt`` (1-based)."""
    step: float = min(CAP_S, FIRST_S * float(2 ** max(0, attempt - 1)))
    if retry_after is None:
        return step
    return max(step, min(retry_after, MAX_RETRY_AFTER_S))


class Backoff:
    """The schedule as a counter: :meth:`next` for each miss, :meth:`reset` on progress."""

    def __init__(self) -> None:
        self.misses = 0

    def next(self, retry_after: float | None = None) -> float:
        self.misses += 1
        return delay(self.misses, retry_after)

    def reset(self) -> None:
        self.misses = 0


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...


class SyncClock(Clock, Protocol):
    def sleep(self, seconds: float) -> None: ...


class AsyncClock(Clock, Protocol):
    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """``time.monotonic`` and ``time.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class AsyncSystemClock:
    """``time.monotonic`` and ``anyio.sleep`` (asyncio or trio, as httpx)."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)
