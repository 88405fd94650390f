"""The slot allocation alone: caps, shares, the reserve, turn order (no database)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from hookrelay.outbox.dispatch.scheduler import (
    Caps,
    InFlight,
    ahead,
    allocate,
    held_hosts,
    with_hints,
)
from hookrelay.outbox.models import CircuitState, TenantId
from hookrelay.outbox.store.delivery import DueLane

DEFAULTS = Caps(total=200, per_host=20, per_tenant=50)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def lane(host: str, tenant: str, due: int = 20, age: int = 0, state: CircuitState = "closed"):
    return DueLane(host, TenantId(tenant), T0 - timedelta(seconds=age), due, state)


def running(*lanes: tuple[str, str, int]) -> InFlight:
    flight = InFlight.empty()
    for host, tenant, n in lanes:
        for _ in range(n):
            flight.add(host, tenant)
    return flight


def test_one_host_gets_exactly_its_free_slots() -> None:
    assert allocate([lane("a", "t")], InFlight.empty(), DEFAULTS, batch=200) == {("a", "t"): 20}
    busy = running(("a", "t", 15))
    assert allocate([lane("a", "t")], busy, DEFAULTS, batch=200) == {("a", "t"): 5}
    full = running(("a", "t", 20))
    assert allocate([lane("a", "t")], full, DEFAULTS, batch=200) == {}


def test_never_more_than_a_lane_has_due_nor_more_than_the_batch() -> None:
    assert allocate([lane("a", "t", due=3)], InFlight.empty(), DEFAULTS, batch=200) == {
        ("a", "t"): 3
    }
    lanes = [lane(f"h{i}", "t") for i in range(20)]
    assert sum(allocate(lanes, InFlight.empty(), DEFAULTS, batch=50).values()) == 50


def test_host_cap_is_shared_by_the_tenants_on_that_host() -> None:
    got = allocate([lane("a", "x"), lane("a", "y")], InFlight.empty(), DEFAULTS, batch=200)
    assert got == {("a", "x"): 10, ("a", "y"): 10}


def test_a_tenant_alone_uses_all_but_the_reserve() -> None:
    lanes = [lane(f"h{i}", "x") for i in range(100)]
    got = allocate(lanes, InFlight.empty(), DEFAULTS, batch=500)
    assert sum(got.values()) == 180  # 200 less the reserve of a tenth
    assert max(got.values()) - min(got.values()) <= 1  # its hosts share evenly


def test_a_newcomer_gets_the_reserve_while_the_hog_gets_nothing() -> None:
    hog = running(*((f"h{i}", "x", 2) for i in range(90)))  # 180 hanging
    lanes = [lane(f"h{i}", "x", age=60) for i in range(100)] + [lane("fast", "y")]
    # Not heard from yet: one slot of the reserve; the rest once it answers.
    assert allocate(lanes, hog, DEFAULTS, batch=200) == {("fast", "y"): 1}
    got = allocate(lanes, hog, DEFAULTS, batch=200, answering={"fast"})
    assert got == {("fast", "y"): 20}


def test_tenants_each_under_their_cap_leave_the_reserve_to_the_next_one() -> None:
    # Ten tenants with a host each that never answers, each under per_tenant (50):
    # together they stop at the reserve's edge, each at its fair share (180 / 10).
    lanes = [lane(f"h{i}", f"x{i}", due=40, age=10) for i in range(10)]
    got = allocate(lanes, InFlight.empty(), DEFAULTS, batch=200)
    assert sorted(got.values()) == [18] * 10
    hung = running(*((f"h{i}", f"x{i}", 18) for i in range(10)))
    # Answering or not, their hosts get no more while another tenant is due...
    for answering in (set(), {f"h{i}" for i in range(10)}):
        got = allocate([*lanes, lane("fast", "y")], hung, DEFAULTS, batch=200, answering=answering)
        assert got == {("fast", "y"): 1}
    # ...nor while it is merely flowing (in flight, nothing due at this round).
    hung.add("fast", "y")
    assert allocate(lanes, hung, DEFAULTS, batch=200) == {}


def test_silent_hosts_arriving_one_by_one_take_one_reserve_slot_each() -> None:
    # Four tenants hold everything short of the reserve; six more arrive, each with
    # a host not heard from, each far under its share: one slot each, the rest is kept.
    flight = running(*((f"h{i}{j}", f"x{i}", 15) for i in range(4) for j in range(3)))
    assert flight.total == 180
    lanes = [lane(f"new{i}", f"late{i}", due=40) for i in range(6)]
    got = allocate(lanes, flight, DEFAULTS, batch=200)
    assert got == {(f"new{i}", f"late{i}"): 1 for i in range(6)}
    for i in range(6):
        flight.add(f"new{i}", f"late{i}")
    got = allocate([*lanes, lane("fast", "y")], flight, DEFAULTS, batch=200)
    assert got == {("fast", "y"): 1}


def test_under_contention_each_tenant_holds_at_most_its_share() -> None:
    lanes = [lane(f"x{i}", "x", age=10) for i in range(10)] + [
        lane(f"y{i}", "y") for i in range(10)
    ]
    got = allocate(lanes, InFlight.empty(), DEFAULTS, batch=200)
    per_tenant = {t: sum(n for (_, tt), n in got.items() if tt == t) for t in ("x", "y")}
    assert per_tenant == {"x": 50, "y": 50}


def test_tenants_take_turns_oldest_first() -> None:
    lanes = [lane("a", "young", age=1), lane("b", "old", age=100), lane("c", "mid", age=50)]
    got = allocate(lanes, running(("z", "z", 199)), DEFAULTS, batch=1)
    assert got == {("b", "old"): 1}


def test_a_tenant_near_its_cap_keeps_room_for_a_host_it_has_not_served() -> None:
    # Tenant x has 48 of its 50 in flight on 3 hosts (over the reserve line of 45)
    # and another tenant is due: only x's idle host may still start.
    flight = running(("a", "x", 16), ("b", "x", 16), ("c", "x", 16), ("o", "other", 1))
    lanes = [lane(h, "x", age=9) for h in "abc"] + [lane("d", "x"), lane("o", "other")]
    got = allocate(lanes, flight, DEFAULTS, batch=200)
    assert got[("d", "x")] == 2 and not {("a", "x"), ("b", "x"), ("c", "x")} & got.keys()


def test_open_circuits_get_no_slots_and_are_held() -> None:
    lanes = [lane("down", "t", state="open"), lane("half", "t", state="half-open"), lane("up", "t")]
    assert allocate(lanes, InFlight.empty(), DEFAULTS, batch=200) == {("up", "t"): 20}
    assert held_hosts(lanes) == ["down", "half"]


def test_in_flight_counters_forget_what_finished() -> None:
    flight = running(("a", "t", 2))
    flight.remove("a", "t")
    flight.remove("a", "t")
    assert flight.total == 0 and not flight.lanes and not flight.hosts and not flight.tenants


def test_lanes_stay_in_view_while_they_give_all_that_was_asked() -> None:
    import uuid

    from hookrelay.outbox.dispatch.scheduler import still_due
    from hookrelay.outbox.store.delivery import ClaimedEvent

    def event(host: str, tenant: str) -> ClaimedEvent:
        return ClaimedEvent(0, "e", tenant, "t", "x", "u", host, b"", 0, 0, 1, uuid.uuid4())  # type: ignore[arg-type]

    lanes = [lane("busy", "t", due=20), lane("few", "t", due=5), lane("dry", "t", due=3)]
    lanes.append(lane("down", "t", state="open"))
    grants = {("busy", "t"): 4, ("few", "t"): 2, ("dry", "t"): 3}
    claimed = [event("busy", "t")] * 4 + [event("few", "t")] * 2 + [event("dry", "t")]
    left = still_due(lanes, grants, claimed, upto=20)
    assert [(x.host, x.due) for x in left] == [("busy", 20), ("few", 3)]


def ahead_of(lanes, flight, grants, *, waiting=None, flowing=None, depth=40):
    flowing = {(x.host, x.tenant_id) for x in lanes} if flowing is None else flowing
    return ahead(
        lanes, grants, flight, DEFAULTS, waiting=waiting or {}, flowing=flowing, depth=depth
    )


def test_a_busy_lane_alone_on_its_full_host_claims_ahead() -> None:
    busy = running(("a", "t", 15))
    grants = allocate([lane("a", "t", due=60)], busy, DEFAULTS, batch=200)
    assert grants == {("a", "t"): 5}
    assert ahead_of([lane("a", "t", due=60)], busy, grants) == {("a", "t"): 40}
    # Never more than the lane has due, nor beyond the depth with what already waits.
    assert ahead_of([lane("a", "t", due=12)], busy, grants) == {("a", "t"): 7}
    assert ahead_of([lane("a", "t", due=60)], busy, grants, waiting={("a", "t"): 30}) == {
        ("a", "t"): 10
    }


def test_nothing_ahead_while_the_host_has_free_slots_or_the_lane_is_not_delivering() -> None:
    busy = running(("a", "t", 10))
    assert ahead_of([lane("a", "t")], busy, {("a", "t"): 5}) == {}
    full = running(("a", "t", 20))
    assert ahead_of([lane("a", "t", due=60)], full, {}, flowing=set()) == {}


def test_nothing_ahead_on_a_host_another_lane_is_waiting_for() -> None:
    # Its freed slots are the other lane's turn: the host's rows take turns.
    full = running(("a", "x", 20))
    assert ahead_of([lane("a", "x", due=60), lane("a", "y", due=60)], full, {}) == {}


def test_nothing_ahead_when_the_slots_could_serve_another_tenant() -> None:
    # Tenant x holds two full hosts and others wait: 40 more would pass its share.
    full = running(("a", "x", 20), ("b", "x", 20))
    lanes = [lane("a", "x", due=60), lane("b", "x", due=60), lane("c", "y")]
    assert ahead_of(lanes, full, {("c", "y"): 20}) == {}
    # Under its share with room to spare, it may.
    one = running(("a", "x", 20))
    got = ahead_of([lane("a", "x", due=60), lane("c", "y")], one, {("c", "y"): 20}, depth=10)
    assert got == {("a", "x"): 10}
    # The whole process near its cap: the reserve is kept.
    crowd = running(*((f"h{i}", "x", 20) for i in range(8)))
    lanes = [lane(f"h{i}", "x", due=60) for i in range(8)]
    assert sum(ahead_of(lanes, crowd, {}).values()) <= 180 - 160


def test_hints_add_to_the_lanes_seen_and_bring_new_ones_due_now() -> None:
    seen = [lane("a", "t1", due=3, age=5), lane("b", "t1", due=1, state="open")]
    now = T0 + timedelta(seconds=1)
    got = with_hints(seen, Counter({("a", "t1"): 2, ("c", "t2"): 1}), now)
    assert got == [
        lane("a", "t1", due=5, age=5),  # counted on, its age kept
        lane("b", "t1", due=1, state="open"),  # untouched
        DueLane("c", TenantId("t2"), now, 1, "closed"),
    ]
