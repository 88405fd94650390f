"""The retry policy: backoff ceilings, equal jitter bounds, Retry-After, the attempt budget."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from hookrelay.outbox.dispatch.retry import RetryPolicy, parse_retry_after
from hookrelay.outbox.errors import ConfigurationError

DEFAULT = RetryPolicy()
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_defaults() -> None:
    assert (DEFAULT.base_s, DEFAULT.cap_s, DEFAULT.max_attempts) == (5.0, 21600.0, 18)


def test_default_ceilings_double_then_cap() -> None:
    expected = [min(21600.0, 5.0 * 2 ** (n - 1)) for n in range(1, 18)]
    assert [DEFAULT.backoff_ceiling(n) for n in range(1, 18)] == expected
    assert expected[:5] == [5, 10, 20, 40, 80]
    assert DEFAULT.backoff_ceiling(13) == 20480
    assert DEFAULT.backoff_ceiling(14) == 21600


@pytest.mark.parametrize("n", [1025, 10_000, 10**18])
def test_huge_attempt_numbers_do_not_overflow(n: int) -> None:
    assert DEFAULT.backoff_ceiling(n) == 21600
    assert 10800 <= DEFAULT.next_delay(n, rng=random.Random(1)) <= 21600


def test_tiny_base_still_doubles_exactly() -> None:
    p = RetryPolicy(base_s=1e-300, cap_s=1e300, max_attempts=5)
    assert p.backoff_ceiling(1001) == 1e-300 * 2.0**1000
    assert p.backoff_ceiling(5000) == 1e300


def test_attempt_numbers_start_at_one() -> None:
    with pytest.raises(ValueError):
        DEFAULT.backoff_ceiling(0)


def test_equal_jitter_bounds() -> None:
    rng = random.Random(20260101)
    for n in range(1, 25):
        c = DEFAULT.backoff_ceiling(n)
        draws = [DEFAULT.next_delay(n, rng=rng) for _ in range(500)]
        assert all(c / 2 <= d <= c for d in draws)
        # Spread over the whole band, not stuck at one end.
        assert min(draws) < c * 0.6 and max(draws) > c * 0.9


def test_seeded_draws_are_reproducible() -> None:
    a = [DEFAULT.next_delay(3, rng=random.Random(5)) for _ in range(3)]
    b = [DEFAULT.next_delay(3, rng=random.Random(5)) for _ in range(3)]
    assert a == b


def test_default_rng_works() -> None:
    assert 2.5 <= DEFAULT.next_delay(1) <= 5


def test_retry_after_lengthens_the_wait() -> None:
    p = RetryPolicy(base_s=1, cap_s=100, max_attempts=5)
    assert p.next_delay(1, retry_after=50, rng=random.Random(0)) == 50


def test_retry_after_shorter_than_jitter_is_ignored() -> None:
    p = RetryPolicy(base_s=10, cap_s=100, max_attempts=5)
    for seed in range(50):
        assert p.next_delay(2, retry_after=1, rng=random.Random(seed)) == p.next_delay(
            2, rng=random.Random(seed)
        )
    assert 5 <= p.next_delay(1, retry_after=0) <= 10


def test_retry_after_is_capped() -> None:
    p = RetryPolicy(base_s=1, cap_s=100, max_attempts=5)
    assert p.next_delay(1, retry_after=5000) == 100
    assert DEFAULT.next_delay(3, retry_after=10**9) == 21600


def test_exhausted_boundary() -> None:
    assert not DEFAULT.exhausted(1)
    assert not DEFAULT.exhausted(17)
    assert DEFAULT.exhausted(18)
    assert DEFAULT.exhausted(19)
    assert RetryPolicy(max_attempts=1).exhausted(1)


def test_default_schedule_is_about_a_day() -> None:
    # 18 attempts leave 17 waits; equal jitter averages 0.75 of each ceiling.
    ceilings = [DEFAULT.backoff_ceiling(n) for n in range(1, DEFAULT.max_attempts)]
    assert len(ceilings) == 17
    midpoint = 0.75 * sum(ceilings)
    assert 12 * 3600 < midpoint < 36 * 3600


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"base_s": 0}, "BASE"),
        ({"base_s": -1}, "BASE"),
        ({"base_s": float("nan")}, "BASE"),
        ({"base_s": 10, "cap_s": 5}, "CAP"),
        ({"cap_s": float("inf")}, "CAP"),
        ({"max_attempts": 0}, "MAX_ATTEMPTS"),
        ({"max_attempts": -3}, "MAX_ATTEMPTS"),
    ],
)
def test_invalid_policy(kwargs: dict[str, float], names: str) -> None:
    with pytest.raises(ConfigurationError, match=names):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_cap_equal_to_base_is_allowed() -> None:
    p = RetryPolicy(base_s=7, cap_s=7, max_attempts=1)
    assert p.backoff_ceiling(1) == p.backoff_ceiling(9) == 7


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("120", 120.0), ("0", 0.0), (" 30 ", 30.0), ("1.5", 1.5), ("0.25", 0.25)],
)
def test_parse_delta_seconds(value: str, seconds: float) -> None:
    assert parse_retry_after(value) == seconds


def test_parse_http_date_in_the_future() -> None:
    value = format_datetime(NOW + timedelta(seconds=90), usegmt=True)
    assert value.endswith("GMT")
    assert parse_retry_after(value, now=NOW) == 90.0


def test_parse_http_date_in_the_past_is_zero() -> None:
    value = format_datetime(NOW - timedelta(hours=1), usegmt=True)
    assert parse_retry_after(value, now=NOW) == 0.0


def test_parse_http_date_with_naive_now() -> None:
    value = format_datetime(NOW + timedelta(seconds=10), usegmt=True)
    assert parse_retry_after(value, now=NOW.replace(tzinfo=None)) == 10.0


def test_parse_obsolete_date_forms() -> None:
    # RFC 9110 asks recipients to accept the RFC 850 and asctime forms too.
    assert parse_retry_after("Thu, 01 Jan 2026 12:01:00 GMT", now=NOW) == 60.0
    assert parse_retry_after("Thursday, 01-Jan-26 12:01:00 GMT", now=NOW) == 60.0
    assert parse_retry_after("Thu Jan  1 12:01:00 2026", now=NOW) == 60.0


@pytest.mark.parametrize(
    "bad", [None, "", "   ", "soon", "-5", "-0.5", "nan", "inf", "1e3", "1_000", "5s", "+5"]
)
def test_parse_garbage_is_none(bad: str | None) -> None:
    assert parse_retry_after(bad, now=NOW) is None
