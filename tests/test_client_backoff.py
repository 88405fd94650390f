"""The one backoff schedule of hookrelay.client: 200 ms doubling to 2 s, Retry-After honoured."""

from __future__ import annotations

import pytest

from hookrelay.client.backoff import Backoff, delay


def test_doubles_from_200_ms_to_a_2_s_cap() -> None:
    assert [delay(n) for n in range(1, 8)] == [0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]


@pytest.mark.parametrize(
    ("attempt", "retry_after", "pause"),
    [(1, 1.0, 1.0), (4, 1.0, 1.6), (5, 0.0, 2.0), (1, 30.0, 30.0), (1, 3600.0, 60.0)],
)
def test_never_sooner_than_retry_after_which_is_capped(attempt, retry_after, pause) -> None:
    assert delay(attempt, retry_after) == pause


def test_counts_misses_until_reset() -> None:
    b = Backoff()
    assert [b.next(), b.next(), b.next(retry_after=5)] == [0.2, 0.4, 5.0]
    b.reset()
    assert b.next() == 0.2
