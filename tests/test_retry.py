"""The retry policy: backoff ceilings, equal jitter bounds, Retry-After, the attempt budget."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from outbox.errors import ConfigurationError
from outbox.retry import RetryPolicy, parse_retry_after

DEFAULT = RetryPolicy()


def test_default_ceilings_double_then_cap() -> None:
    assert [DEFAULT.backoff_ceiling(n) for n in range(1, 6)] == [5, 10, 20, 40, 80]
    assert DEFAULT.backoff_ceiling(13) == 20480
    assert DEFAULT.backoff_ceiling(14) == 21600
    assert DEFAULT.backoff_ceiling(10_000) == 21600


def test_equal_jitter_bounds() -> None:
    rng = random.Random(7)
    for n in range(1, 18):
        c = DEFAULT.backoff_ceiling(n)
        for _ in range(200):
            assert c / 2 <= DEFAULT.next_delay(n, rng=rng) <= c


def test_retry_after_lengthens_but_never_past_cap() -> None:
    p = RetryPolicy(base_s=1, cap_s=100, max_attempts=5)
    assert p.next_delay(1, retry_after=50) == 50
    assert p.next_delay(1, retry_after=5000) == 100
    assert 0.5 <= p.next_delay(1, retry_after=0) <= 1


def test_budget_counts_every_attempt() -> None:
    assert not DEFAULT.exhausted(17) and DEFAULT.exhausted(18)
    assert RetryPolicy(max_attempts=1).exhausted(1)


def test_default_schedule_is_about_a_day() -> None:
    expected = sum(0.75 * DEFAULT.backoff_ceiling(n) for n in range(1, 18))
    assert 12 * 3600 < expected < 36 * 3600


@pytest.mark.parametrize("args", [(0, 10, 3), (10, 5, 3), (1, 10, 0), (-1, 10, 3)])
def test_invalid_policy(args) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigurationError):
        RetryPolicy(*args)


def test_parse_retry_after() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("120") == 120 and parse_retry_after("1.5") == 1.5
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True),
                             now=now) == 30
    assert parse_retry_after(format_datetime(now - timedelta(hours=1), usegmt=True), now=now) == 0
    for bad in (None, "", "soon", "-5", "nan", "inf"):
        assert parse_retry_after(bad) is None
