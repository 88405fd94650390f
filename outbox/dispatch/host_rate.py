"""HOOKRELAY_PER_HOST_RATE: most requests a second to one host, across every dispatcher.

A token bucket per host, in the database (table ``host_rates``, migration 0020), so
every dispatcher process of the database draws from the same one. Before a claim, the
dispatcher asks the buckets of the hosts it means to claim for (``take_host_tokens``,
one statement) and claims no more than they grant; tokens granted and not used (fewer
rows due than counted, rows another dispatcher took, a circuit that opened) go back.
A row the rate holds is simply not claimed: it stays due, spends no attempt, and is
claimed once its host's bucket has refilled. The dispatcher leaves that host out of
its claims for :attr:`HostRate.wait_s` rather than asking an empty bucket in a loop;
other hosts are claimed for meanwhile as usual.

How it meets the rest of the claim (``dispatch.scheduler``): the scheduler shares the
free slots between lanes as always; the rate caps each host's share, split between
that host's lanes (tenants) in turn, starting from a different lane each round so no
tenant of a busy host goes without. Nothing is leased ahead of a free slot while a
rate is set (``claim_ahead``): a row waiting ahead would be sent later than the token
it took, bunching requests. A host whose circuit is open takes no tokens (its rows are
held before they are counted), and the single probe of a half-open circuit is not
counted: one request per probe interval.

The bucket holds at most :data:`BURST_S` seconds' worth of tokens (at least one), so a
host idle for a while gets that small burst, never a second's worth at once. Unset, no
statement reads or writes ``host_rates``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

import asyncpg

from hookrelay.outbox.dispatch.scheduler import Lane
from hookrelay.outbox.store import delivery
from hookrelay.outbox.store.delivery import ClaimedEvent

BURST_S = 0.1
# The shortest wait before asking an empty bucket again: at high rates, one token a
# round would cost a claim round per request.
MIN_WAIT_S = 0.05


class HostRate:
    """One dispatcher's side of the shared per-host buckets."""

    def __init__(self, rate: float) -> None:
        if rate <= 0:
            raise ValueError("the per-host rate must be positive")
        self.rate = rate
        self.burst = max(1.0, rate * BURST_S)
        self.wait_s = max(MIN_WAIT_S, min(0.5, 1.0 / rate))
        self._turn = 0  # which lane of a host is served first this round

    async def take(
        self, conn: asyncpg.Connection, asked: Counter[Lane]
    ) -> tuple[Counter[Lane], set[str]]:
        """``asked`` capped by what the hosts' buckets grant, and the hosts that granted
        less than was asked of them."""
        lanes_of: dict[str, list[Lane]] = defaultdict(list)
        for lane, n in asked.items():
            if n > 0:
                lanes_of[lane[0]].append(lane)
        wanted = {host: sum(asked[lane] for lane in lanes) for host, lanes in lanes_of.items()}
        if not wanted:
            return Counter(), set()
        granted = await delivery.take_host_tokens(
            conn, wanted=wanted, rate=self.rate, burst=self.burst
        )
        self._turn += 1
        out: Counter[Lane] = Counter()
        for host, lanes in lanes_of.items():
            out.update(_share(granted.get(host, 0), lanes, asked, self._turn))
        return out, {host for host, n in wanted.items() if granted.get(host, 0) < n}

    async def give_back(
        self, conn: asyncpg.Connection, asked: Counter[Lane], claimed: Sequence[ClaimedEvent]
    ) -> None:
        """Return the tokens of ``asked`` that ``claimed`` did not use."""
        unused: Counter[str] = Counter()
        for (host, _), n in asked.items():
            unused[host] += n
        for event in claimed:
            unused[event.host] -= 1
        left = {host: n for host, n in unused.items() if n > 0}
        if left:
            await delivery.return_host_tokens(conn, unused=left, burst=self.burst)


def _share(tokens: int, lanes: list[Lane], asked: Counter[Lane], turn: int) -> Counter[Lane]:
    """``tokens`` shared between a host's ``lanes`` one at a time, in turn, starting with
    the lane ``turn`` picks, each getting no more than it asked."""
    out: Counter[Lane] = Counter()
    order = lanes[turn % len(lanes) :] + lanes[: turn % len(lanes)]
    while tokens > 0:
        gave = False
        for lane in order:
            if tokens > 0 and out[lane] < asked[lane]:
                out[lane] += 1
                tokens -= 1
                gave = True
        if not gave:
            break
    return out
