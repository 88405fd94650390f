"""Who gets the free delivery slots: fair between tenants, fair between hosts within a tenant.

Work is split into lanes, one per (host, tenant): the outbox index keeps each
lane's rows together in due order (``outbox_lane_due``), so a claim round reads
the lanes that have due rows (``store.delivery.due_lanes``), hands out slots
here, and leases at most that many rows per lane (``claim_lanes``). A claim
takes only what can start: nothing is leased to be given back. A busy lane
whose freed slots nobody else could take also leases a few rows ahead
(:func:`ahead`, ``claim_ahead``); they only ever take that lane's own freed
slots, so none of the rules below changes.

The rules of one round, over the lanes with due rows whose circuit is closed:

- **Host cap.** A host never has more than ``per_host`` deliveries in flight,
  whichever tenants they belong to.
- **Tenant share.** While another tenant has due rows, a tenant holds at most
  ``per_tenant`` slots; a tenant alone may use every slot but the reserve.
- **Reserve.** The last tenth of all slots goes only to a tenant holding fewer
  than its fair share, and only to a host that has answered in the last
  ``ANSWERED_S`` or has nothing in flight; the last tenth of a tenant's cap goes
  only to a host holding fewer than its equal part of that cap. So a newcomer
  finds room at once even while other tenants' (or hosts') attempts all hang
  until their deadline: a running request is never taken back, so room must be
  kept. A tenant's fair share is the slots short of the reserve divided among
  the tenants that hold slots or have due rows, and never more than
  ``per_tenant``. It is the share, not ``per_tenant`` alone, because several
  tenants can each stay under ``per_tenant`` and still hold every slot between
  them: ten tenants, each with a host that never answers, took all 200 slots
  at 20 each (the per-host cap) and another tenant got nothing until their
  attempts timed out. Tenants crowding in together are evened out by the turns
  below, so at the reserve's edge each holds about its share and none may go
  on. The host rule covers tenants that arrive one after another, or unevenly,
  while others are stuck: one under its share could otherwise take the whole
  reserve at once; a host not heard from takes one slot of it, and more only
  once it answers. Below the reserve neither rule applies: slots are free
  there, and holding them back would only leave them idle.
- **Order.** Tenants take one slot each in turn, the one whose oldest due row
  has waited longest first; within a tenant its lanes take turns the same way.
  A lane never gets more slots than it has due rows.

Why nothing with due rows starves: every attempt ends by its deadline, so
slots keep coming free; in every round the first slot goes to the lane whose
oldest due row has waited longest among those its host and tenant caps let
start, and rows that become due later are younger, so only finitely many rows
can ever be served ahead of a waiting one. The reserve bounds the wait of a
tenant under its share to the time the reserve takes to turn over, however
many slots other tenants' stuck hosts hold. It runs out only when, while
everything short of it is held, more silent hosts than it has slots each take
one (a newcomer's first slot cannot be refused: it may be the tenant to
protect), or hosts go quiet within ``ANSWERED_S`` of an answer.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TypeVar, cast

from hookrelay.outbox.models import TenantId
from hookrelay.outbox.store.delivery import ClaimedEvent, DueLane

Lane = tuple[str, str]  # (host, tenant_id)
K = TypeVar("K")
RESERVE_FRACTION = 10  # the reserve is 1/10th of a cap (at least one slot)
# How far ahead a host's rows are moved while its circuit is not closed. Its
# closing puts them back at once; this only bounds how long they stay out of
# sight if it stays open (they are then held again, once per HOLD_S).
HOLD_S = 3600.0
# A host that answered (any HTTP status) within this long is turning its slots
# over, and may take slots of the reserve beyond its first. One second, the wait
# the reserve is meant to bound: a host that goes quiet right after an answer
# takes reserve slots beyond its first for no longer than that.
ANSWERED_S = 1.0


@dataclass(frozen=True)
class Caps:
    total: int
    per_host: int
    per_tenant: int


@dataclass
class InFlight:
    """Deliveries running in this process, counted the three ways the caps need."""

    lanes: Counter[Lane]
    hosts: Counter[str]
    tenants: Counter[str]

    @classmethod
    def empty(cls) -> InFlight:
        return cls(Counter(), Counter(), Counter())

    @property
    def total(self) -> int:
        return self.hosts.total()

    def add(self, host: str, tenant: str) -> None:
        self.lanes[(host, tenant)] += 1
        self.hosts[host] += 1
        self.tenants[tenant] += 1

    def remove(self, host: str, tenant: str) -> None:
        _decrement(self.lanes, (host, tenant))
        _decrement(self.hosts, host)
        _decrement(self.tenants, tenant)


def _decrement(counter: Counter[K], key: K) -> None:
    # Zero entries are deleted so the counters stay as small as what runs.
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


def _reserve(cap: int) -> int:
    return max(1, cap // RESERVE_FRACTION)


def allocate(
    lanes: Iterable[DueLane],
    flight: InFlight,
    caps: Caps,
    *,
    batch: int,
    answering: Set[str] = frozenset(),
) -> dict[Lane, int]:
    """Slots for each lane this round (lanes absent get none), at most ``batch`` in all.

    ``answering``: the hosts that answered within ``ANSWERED_S`` (the reserve's host rule).
    """
    by_tenant: dict[str, deque[DueLane]] = {}
    for lane in sorted((x for x in lanes if x.state == "closed"), key=lambda x: x.oldest):
        by_tenant.setdefault(lane.tenant_id, deque()).append(lane)
    tenant_cap = caps.per_tenant if len(by_tenant) > 1 else caps.total
    edge = caps.total - _reserve(caps.total)  # the reserve starts here
    active = len(by_tenant.keys() | flight.tenants.keys())
    share = min(caps.per_tenant, max(1, edge // max(1, active)))
    hosts, tenants, running = Counter(flight.hosts), Counter(flight.tenants), flight.total
    on_lane = Counter(flight.lanes)
    grants: Counter[Lane] = Counter()
    budget = min(batch, caps.total - running)
    turns = deque(by_tenant)  # already oldest first: dicts keep insertion order

    def fits(lane: DueLane) -> bool:
        key, t = (lane.host, lane.tenant_id), lane.tenant_id
        if grants[key] >= lane.due or hosts[lane.host] >= caps.per_host:
            return False
        if tenants[t] >= tenant_cap:
            return False
        if running >= edge and (
            tenants[t] >= share or (hosts[lane.host] > 0 and lane.host not in answering)
        ):
            return False  # the reserve: see the module's docstring
        equal_part = max(1, tenant_cap // len(by_tenant[t]))
        return tenants[t] < tenant_cap - _reserve(tenant_cap) or on_lane[key] < equal_part

    while budget > 0 and turns:
        tenant = turns.popleft()
        queue = by_tenant[tenant]
        for _ in range(len(queue)):
            lane = queue[0]
            queue.rotate(-1)
            if fits(lane):
                key = (lane.host, lane.tenant_id)
                grants[key] += 1
                on_lane[key] += 1
                hosts[lane.host] += 1
                tenants[tenant] += 1
                running += 1
                budget -= 1
                turns.append(tenant)  # back of the line: one slot per turn
                break
        # A tenant none of whose lanes fit drops out: grants only shrink room.
    return dict(grants)


def ahead(
    lanes: Sequence[DueLane],
    grants: Mapping[Lane, int],
    flight: InFlight,
    caps: Caps,
    *,
    waiting: Mapping[Lane, int],
    flowing: Set[Lane],
    depth: int,
) -> dict[Lane, int]:
    """Rows to lease ahead of a free slot for each lane (``hookrelay.outbox.dispatch.claim_ahead``).

    Only for a lane whose freed slots no other lane could take: the only lane
    with due rows on its host, that host full after this round's grants, its
    tenant and the whole process well under their caps (short of the reserve
    by the rows waiting ahead too), and that has delivered since the last round
    (a hanging or failing host gets nothing ahead). Anyone else with due rows
    thus takes freed slots exactly as before: the rows waiting ahead of a lane
    only ever replace that lane's own deliveries, at most ``depth`` of them
    after a look at the lanes shows a newcomer on their host.
    """
    open_lanes = [x for x in lanes if x.state == "closed"]
    on_host = Counter(x.host for x in open_lanes)
    tenant_cap = caps.per_tenant if len({x.tenant_id for x in open_lanes}) > 1 else caps.total
    granted_tenant: Counter[str] = Counter()
    for (_, tenant), n in grants.items():
        granted_tenant[tenant] += n
    waiting_tenant: Counter[str] = Counter()
    for (_, tenant), n in waiting.items():
        waiting_tenant[tenant] += n
    busy = flight.total + sum(grants.values()) + sum(waiting.values())
    out: dict[Lane, int] = {}
    for x in open_lanes:
        key, t = (x.host, x.tenant_id), x.tenant_id
        if on_host[x.host] > 1 or key not in flowing:
            continue
        if flight.hosts[x.host] + grants.get(key, 0) < caps.per_host:
            continue  # free slots on the host: they are claimed as such
        tenant_busy = flight.tenants[t] + granted_tenant[t] + waiting_tenant[t]
        room = depth - waiting.get(key, 0)
        if busy + room > caps.total - _reserve(caps.total):
            continue
        if tenant_busy + room > tenant_cap - _reserve(tenant_cap):
            continue
        n = min(room, x.due - grants.get(key, 0))
        if n > 0:
            out[key] = n
            busy += n
            waiting_tenant[t] += n
    return out


def still_due(
    lanes: Sequence[DueLane], grants: dict[Lane, int], claimed: Sequence[ClaimedEvent], *, upto: int
) -> list[DueLane]:
    """The lanes worth claiming from again without looking: those that gave all
    that was asked and had rows left. A lane counted at ``upto`` may hold any
    number more, so it stays at ``upto``."""
    got = Counter((e.host, e.tenant_id) for e in claimed)
    left = []
    for lane in lanes:
        key = (lane.host, lane.tenant_id)
        if lane.state != "closed" or got[key] < grants.get(key, 0):
            continue  # held back, or ran dry (or other dispatchers took the rest)
        due = upto if lane.due >= upto else lane.due - got[key]
        if due > 0:
            left.append(replace(lane, due=due))
    return left


def with_hints(lanes: Sequence[DueLane], hints: Counter[Lane], now: datetime) -> list[DueLane]:
    """``lanes`` and the lanes new events were just committed on (``hints``: how many
    each), as if a look had found them: due now, behind a closed circuit. A hint is
    only a guess, and safe as one: the claim takes only what is due on a host whose
    circuit is closed, and a lane that gives less than asked drops out (still_due)."""
    merged: dict[Lane, DueLane] = {(x.host, x.tenant_id): x for x in lanes}
    for (host, tenant), n in hints.items():
        seen = merged.get((host, tenant))
        if seen is None:
            merged[host, tenant] = DueLane(host, cast(TenantId, tenant), now, n, "closed")
        else:
            merged[host, tenant] = replace(seen, due=seen.due + n)
    return list(merged.values())


def held_hosts(lanes: Sequence[DueLane]) -> list[str]:
    """Hosts with due rows behind a circuit that is not closed: to be held back."""
    return sorted({x.host for x in lanes if x.state != "closed"})
