"""``MemorySeen``: the in-memory deduplication store of hookrelay.receiver."""

from __future__ import annotations

import threading

from hookrelay.receiver import MemorySeen


def test_first_time_only_and_discard_lets_it_in_again() -> None:
    seen = MemorySeen()
    assert [seen.add("evt_1"), seen.add("evt_1"), seen.add("evt_2")] == [True, False, True]
    seen.discard("evt_1")  # the work failed: the retry must do it
    assert "evt_1" not in seen and seen.add("evt_1")
    seen.discard("evt_unknown")
    assert len(seen) == 2


def test_keeps_the_most_recent_ids_up_to_its_limit() -> None:
    seen = MemorySeen(limit=2)
    for webhook_id in ("a", "b", "a", "c"):
        seen.add(webhook_id)
    assert "b" not in seen and "a" in seen and "c" in seen


def test_one_winner_among_threads() -> None:
    seen, wins = MemorySeen(), []
    barrier = threading.Barrier(8)

    def deliver() -> None:
        barrier.wait()
        if seen.add("evt_same"):
            wins.append(1)

    threads = [threading.Thread(target=deliver) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins == [1]
