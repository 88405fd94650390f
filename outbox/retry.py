"""The retry policy as data: pure, so the schedule it yields can be persisted and tested."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from .errors import ConfigurationError


@dataclass(frozen=True)
class RetryPolicy:
    base_s: float = 5.0
    cap_s: float = 21600.0
    max_attempts: int = 18

    def __post_init__(self) -> None:
        if not (self.base_s > 0 and self.cap_s >= self.base_s and self.max_attempts >= 1):
            raise ConfigurationError(
                "retry policy needs base > 0, cap >= base and max attempts >= 1"
            )

    def backoff_ceiling(self, attempt: int) -> float:
        """min(cap, base * 2^(n-1)) for the attempt n that just failed."""
        exponent = min(max(attempt, 1) - 1, 64)  # 2^64 * base is past any cap
        return min(self.cap_s, self.base_s * 2.0**exponent)

    def next_delay(
        self, attempt: int, *, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Equal jitter: uniform in [ceiling/2, ceiling]; a server's Retry-After
        may lengthen it, never past the cap."""
        ceiling = self.backoff_ceiling(attempt)
        delay = (rng or random).uniform(ceiling / 2, ceiling)
        if retry_after is not None:
            delay = min(max(delay, retry_after), self.cap_s)
        return delay

    def exhausted(self, attempts_made: int) -> bool:
        """Attempts count from the first, so n failed attempts of n allowed is the end."""
        return attempts_made >= self.max_attempts


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP-date), or None."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    return seconds if seconds >= 0 and seconds == seconds and seconds != float("inf") else None
