"""Writes attempt outcomes in batches: one statement, one round trip, one transaction each.

A batch waits a little for companions (``LINGER_S``), and longer while outcomes
keep coming (up to ``BUSY_LINGER_S``): measured on one busy host, batches of a
dozen outcomes cost 6 µs of this process's CPU per outcome and one commit each,
batches of a hundred 3 µs. An outcome waiting here delays only its row's
bookkeeping (the task's delivery summary); the webhook has already been sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from itertools import groupby

import asyncpg

from hookrelay.outbox.dispatch.attempt import AttemptResult
from hookrelay.outbox.dispatch.circuit import BreakerPolicy
from hookrelay.outbox.metrics import ATTEMPT_SECONDS, DELIVERIES
from hookrelay.outbox.store.delivery import OutcomeRow, record_outcomes
from hookrelay.outbox.store.pool import TRANSIENT_ERRORS

log = logging.getLogger("hookrelay.dispatcher")

# How long an outcome may wait for companions before it is written alone: short
# against an HTTP round trip, long enough to batch a busy dispatcher's results.
LINGER_S = 0.005
# Once BUSY_AT outcomes gathered in one wait (2,000 a second over LINGER_S), the
# next batch may wait this long to fill up; it stays busy while BUSY_AT keep coming
# in that longer wait (down to 400 a second), then goes back to LINGER_S.
BUSY_LINGER_S = 0.025
BUSY_AT = 10
RETRY_PAUSE_S = 0.5


class Recorder:
    def __init__(
        self,
        pool: asyncpg.Pool,
        counters: Counter[str],
        *,
        batch_size: int,
        breaker: BreakerPolicy,
    ) -> None:
        self._pool = pool
        self._breaker = breaker
        self._counters = counters
        self._batch_size = batch_size
        self._pending: list[AttemptResult] = []
        self._ready = asyncio.Event()
        self._stopping = False
        self._busy = False  # outcomes are coming fast: let the next batch grow

    def add(self, result: AttemptResult) -> None:
        self._pending.append(result)
        self._ready.set()

    async def stop(self) -> None:
        self._stopping = True
        self._ready.set()

    async def run(self) -> None:
        """Flush until stopped, then flush what is left."""
        while True:
            await self._ready.wait()
            if not self._stopping and len(self._pending) < self._batch_size:
                await asyncio.sleep(BUSY_LINGER_S if self._busy else LINGER_S)
            self._ready.clear()
            self._busy = len(self._pending) >= BUSY_AT
            while self._pending:
                batch = self._pending[: self._batch_size]
                if await self._write(batch):
                    del self._pending[: len(batch)]
                elif self._stopping:
                    log.error(
                        "dropping %d unrecorded outcomes at shutdown; their leases "
                        "will expire and the events be retried",
                        len(self._pending),
                    )
                    self._pending.clear()
                else:
                    await asyncio.sleep(RETRY_PAUSE_S)
            if self._stopping:
                return

    async def _write(self, batch: list[AttemptResult]) -> bool:
        rows = [
            OutcomeRow(
                r.event.id,
                r.event.token,
                r.outcome,
                r.next_at,
                r.status_code,
                r.error,
                r.attempted_at,
                r.duration_ms,
                r.response_prefix,
            )
            for r in batch
        ]
        try:
            async with self._pool.acquire() as conn:
                kept = await record_outcomes(
                    conn,
                    outcomes=rows,
                    breaker_threshold=self._breaker.threshold,
                    breaker_probe_s=self._breaker.probe_s,
                )
        except TRANSIENT_ERRORS as exc:
            log.warning("recording %d outcomes failed, will retry: %s", len(batch), exc)
            return False
        except asyncpg.PostgresError as exc:
            if len(batch) == 1:
                # Not transient and not the batch's fault: drop this one outcome;
                # its lease runs out and the event is attempted again.
                log.error(
                    "cannot record outcome: %s", exc, extra={"event_id": batch[0].event.event_id}
                )
                self._counters["unrecorded"] += 1
                return True
            for one in batch:
                while not await self._write([one]):
                    await asyncio.sleep(RETRY_PAUSE_S)
            return True
        except Exception as exc:
            # e.g. asyncpg's InternalClientError when a connection is killed
            # while the pool resets it: the recorder must survive and retry.
            log.warning("recording %d outcomes failed, will retry: %r", len(batch), exc)
            return False
        outcomes = sorted(r.outcome if r.event.id in kept else "stale" for r in batch)
        for outcome, same in groupby(outcomes):
            n = sum(1 for _ in same)
            self._counters[outcome] += n
            DELIVERIES.labels(outcome).inc(n)
        for r in batch:
            ATTEMPT_SECONDS.observe(r.duration_ms / 1000)
        return True
