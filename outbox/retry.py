"""The retry policy as data: pure, so the schedule it yields can be persisted and tested.

After failed attempt n the next waits a random time in [c/2, c] with
c = min(cap, base * 2^(n-1)) ("equal jitter": never hammering a receiver that
just failed, yet spreading a herd of retries). ``max_attempts`` counts every
attempt, the first included.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from hookrelay.outbox.errors import ConfigurationError

# Digits with an optional fraction; float() alone would also take "1e3", "1_0", "inf".
_DELTA_SECONDS = re.compile(r"\d+(?:\.\d+)?", re.ASCII)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with equal jitter and an attempt budget."""

    base_s: float = 5.0
    cap_s: float = 21600.0
    max_attempts: int = 18

    def __post_init__(self) -> None:
        # isfinite as well: an infinite cap would leave delays unbounded, NaN poisons them.
        if not (math.isfinite(self.base_s) and self.base_s > 0):
            raise ConfigurationError(
                f"HOOKRELAY_RETRY_BASE_S must be a positive number, got {self.base_s!r}"
            )
        if not (math.isfinite(self.cap_s) and self.cap_s >= self.base_s):
            raise ConfigurationError(
                f"HOOKRELAY_RETRY_CAP_S ({self.cap_s!r}) must be at least "
                f"HOOKRELAY_RETRY_BASE_S ({self.base_s!r})"
            )
        if self.max_attempts < 1:
            raise ConfigurationError(
                f"HOOKRELAY_MAX_ATTEMPTS must be at least 1, got {self.max_attempts!r}"
            )

    def backoff_ceiling(self, attempt: int) -> float:
        """min(cap, base * 2^(n-1)) for the attempt n (>= 1) that just failed."""
        if attempt < 1:
            raise ValueError(f"attempt numbers start at 1, got {attempt}")
        # The exponent is clamped before ldexp so a huge n costs nothing; past 2100
        # doublings any finite base is beyond any finite cap.
        try:
            raw = math.ldexp(self.base_s, min(attempt - 1, 2100))
        except OverflowError:
            return self.cap_s
        return min(self.cap_s, raw)

    def next_delay(
        self,
        attempt: int,
        *,
        retry_after: float | None = None,
        rng: random.Random | None = None,
    ) -> float:
        """Seconds to wait after failed attempt ``attempt``.

        A server's Retry-After (429/503) may lengthen the wait, never past ``cap_s``.
        """
        ceiling = self.backoff_ceiling(attempt)
        delay = (rng or random).uniform(ceiling / 2, ceiling)
        if retry_after is not None and retry_after > delay:
            delay = min(retry_after, self.cap_s)
        return delay

    def exhausted(self, attempts_made: int) -> bool:
        """True when no attempt is left after ``attempts_made`` (all of them failed)."""
        return attempts_made >= self.max_attempts


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds from a Retry-After value (delta-seconds or HTTP-date); None if unusable.

    A date already past gives 0.0; a naive ``now`` is taken as UTC.
    """
    if value is None:
        return None
    text = value.strip()
    if _DELTA_SECONDS.fullmatch(text):
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        # RFC 9110 dates are always GMT; "-0000" parses as naive.
        when = when.replace(tzinfo=UTC)
    current = datetime.now(UTC) if now is None else now
    if current.tzinfo is None:
        current = current.replace(tzinfo=UTC)
    return max(0.0, (when - current).total_seconds())
