"""The per-host circuit breaker: its policy, its states, and how probes are granted.

State lives in the ``destinations`` table, one row per host that has failed.
Each batch of outcomes moves it in the same statement that records them
(``store.delivery.record_outcomes``): an answer from the host closes its
circuit; ``threshold`` failures in a row open it. An open circuit holds the
host's events (the claim skips them, their budget unspent) until ``probe_s``
has passed; then one dispatcher is granted one probe (half-open), whose
outcome closes the circuit or opens it again for another ``probe_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from hookrelay.outbox.models import CircuitState
from hookrelay.outbox.store import destinations as store
from hookrelay.outbox.store.destinations import Destination

__all__ = ["BreakerPolicy", "CircuitState", "Destination", "destinations", "take_probes"]


# No slots: the class attributes are the defaults, which the settings read.
@dataclass(frozen=True)
class BreakerPolicy:
    threshold: int = 10  # consecutive failures that open a host's circuit
    probe_s: float = 30.0  # how often an open circuit lets one probe through


async def take_probes(conn: asyncpg.Connection, policy: BreakerPolicy) -> list[str]:
    """Hosts whose open circuit is due a probe, granted to the caller alone (half-open)."""
    return await store.take_probes(conn, probe_s=policy.probe_s)


async def destinations(conn: asyncpg.Connection, *, limit: int) -> list[Destination]:
    """Every host the breaker tracks, unhealthy first."""
    return await store.list_destinations(conn, limit=limit)
