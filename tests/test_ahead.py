"""The rows waiting ahead of a free slot: order, age limit, giving back (no database)."""

from __future__ import annotations

import uuid

from hookrelay.outbox.dispatch.claim_ahead import AheadQueues
from hookrelay.outbox.keys.signing import Signer, generate_secret
from hookrelay.outbox.models import EventId, TenantId
from hookrelay.outbox.store.delivery import ClaimedEvent

SIGNER = Signer([generate_secret()])


def row(i: int, host: str = "a", tenant: str = "t") -> ClaimedEvent:
    return ClaimedEvent(
        i, EventId(f"evt_{i}"), TenantId(tenant), None, "x", "http://a/", host, b"{}", 0, 0, 1,
        uuid.uuid4(),
    )  # fmt: skip


def test_a_lane_takes_its_own_rows_oldest_first() -> None:
    q = AheadQueues(depth=4, max_wait_s=10)
    for i in range(3):
        q.put(row(i), SIGNER, now=0)
    q.put(row(9, host="b"), SIGNER, now=0)
    assert q.waiting() == {("a", "t"): 3, ("b", "t"): 1}
    taken = [q.take(("a", "t"), now=1) for _ in range(4)]
    assert [w.event.id if w else None for w in taken] == [0, 1, 2, None]
    assert q.waiting() == {("b", "t"): 1}
    assert q.take(("c", "t"), now=1) is None


def test_low_at_half_the_depth() -> None:
    q = AheadQueues(depth=4, max_wait_s=10)
    assert q.low(("a", "t"))
    for i in range(3):
        q.put(row(i), SIGNER, now=0)
    assert not q.low(("a", "t"))
    q.take(("a", "t"), now=0)
    assert q.low(("a", "t"))


def test_rows_that_waited_too_long_are_given_back_not_sent() -> None:
    q = AheadQueues(depth=4, max_wait_s=5)
    q.put(row(0), SIGNER, now=0)
    q.put(row(1), SIGNER, now=4)
    q.put(row(2, host="b"), SIGNER, now=0)
    # take() skips the stale head and keeps it for expired().
    w = q.take(("a", "t"), now=6)
    assert w is not None and w.event.id == 1
    assert sorted(e.id for e in q.expired(now=6)) == [0, 2]
    assert q.expired(now=6) == [] and len(q) == 0


def test_clear_gives_back_everything_still_waiting() -> None:
    q = AheadQueues(depth=4, max_wait_s=5)
    q.put(row(0), SIGNER, now=0)
    q.put(row(1, host="b"), SIGNER, now=0)
    assert q.take(("a", "t"), now=9) is None  # stale: set aside
    assert sorted(e.id for e in q.clear()) == [0, 1]
    assert len(q) == 0 and q.clear() == []
