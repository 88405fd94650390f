"""Writes attempt outcomes in batches: one statement, one round trip, one transaction each.

A batch waits a little for companions (``LINGER_S``), and longer while outcomes
keep coming (up to ``BUSY_LINGER_S``): measured on one busy host, batches of a
dozen outcomes cost 6 µs of this process's CPU per outcome and one commit each,
batches of a hundred 3 µs. An outcome waiting here delays only its row's
bookkeeping (the task's delivery summary); the webhook has already been sent. But
one that hands an ordering key on (delivered or dead, with a key) holds up its key's
next webhook, so a batch holding one goes without waiting: measured with 20 keys on
one host (python -m bench ordered), the drain went from 0.27 to 0.51 of unordered.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from itertools import groupby

import asyncpg

from hookrelay.outbox.dispatch.attempt import AttemptResult
from hookrelay.outbox.dispatch.circuit import BreakerPolicy
from hookrelay.outbox.metrics import ATTEMPT_SECONDS, DELIVERIES
from hookrelay.outbox.store.delivery import OutcomeRow, record_outcomes
from hookrelay.outbox.store.pool import RETRYABLE_ERRORS

log = logging.getLogger("hookrelay.dispatcher")

# How long an outcome may wait for companions before it is written alone. At a few
# hundred deliveries a second an outcome per write cost a round trip and a timer's
# wake-up per delivery, which on small machines weigh more than the write itself;
# 20 ms gathers a few. The webhook has been sent meanwhile: only its bookkeeping waits.
LINGER_S = 0.02
# Once BUSY_AT outcomes gathered in one wait (500 a second over LINGER_S), the next
# batch may wait this long to fill up; it stays busy while BUSY_AT keep coming in
# that longer wait (down to 400 a second), then goes back to LINGER_S.
BUSY_LINGER_S = 0.025
BUSY_AT = 10
RETRY_PAUSE_S = 0.5
# How soon an outcome whose ordering key another transaction held is tried again.
KEY_HELD_RETRY_S = 0.05


class Recorder:
    def __init__(
        self,
        pool: asyncpg.Pool,
        counters: Counter[str],
        *,
        batch_size: int,
        breaker: BreakerPolicy,
        on_handed: Callable[[], None] | None = None,
    ) -> None:
        self._pool = pool
        self._on_handed = on_handed  # a batch handed ordering keys on
        self._breaker = breaker
        self._counters = counters
        self._batch_size = batch_size
        self._pending: list[AttemptResult] = []
        self._ready = asyncio.Event()
        self._stopping = False
        self._busy = False  # outcomes are coming fast: let the next batch grow
        # An outcome that hands an ordering key on is waiting: its key's next event
        # is sent only once it is written, so the batch goes without lingering.
        self._urgent = False

    def add(self, result: AttemptResult) -> None:
        self._pending.append(result)
        if result.outcome != "retry" and result.event.ordering_key is not None:
            # The next event of its key waits for this write: no linger.
            self._urgent = True
        self._ready.set()

    def _again(self, results: list[AttemptResult]) -> None:
        for r in results:
            self.add(r)

    async def stop(self) -> None:
        self._stopping = True
        self._ready.set()

    async def run(self) -> None:
        """Flush until stopped, then flush what is left."""
        while True:
            await self._ready.wait()
            if not (self._stopping or self._urgent) and len(self._pending) < self._batch_size:
                await asyncio.sleep(BUSY_LINGER_S if self._busy else LINGER_S)
            self._ready.clear()
            self._urgent = False
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
        # Keyed events that leave the outbox hand their keys on: the key's next
        # event becomes due, and this dispatcher looks for it at once.
        keys = {
            r.event.id: key
            for r in batch
            if r.outcome != "retry" and (key := r.event.key) is not None
        }
        held: set[int] = set()
        try:
            async with self._pool.acquire() as conn:
                kept = await record_outcomes(
                    conn,
                    outcomes=rows,
                    breaker_threshold=self._breaker.threshold,
                    breaker_probe_s=self._breaker.probe_s,
                    keys=keys,
                    held=held,
                )
        except RETRYABLE_ERRORS as exc:
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
        if held:
            # Their key is held by a transaction still open (an executor queueing an
            # event of it): written in a later batch, not waited for here.
            later = [r for r in batch if r.event.id in held]
            self._counters["key_held"] += len(later)
            asyncio.get_running_loop().call_later(KEY_HELD_RETRY_S, self._again, later)
            batch = [r for r in batch if r.event.id not in held]
        if keys and self._on_handed is not None:
            self._on_handed()
        outcomes = sorted(r.outcome if r.event.id in kept else "stale" for r in batch)
        for outcome, same in groupby(outcomes):
            n = sum(1 for _ in same)
            self._counters[outcome] += n
            DELIVERIES.labels(outcome).inc(n)
        for r in batch:
            ATTEMPT_SECONDS.observe(r.duration_ms / 1000)
        return True
