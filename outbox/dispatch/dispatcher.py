"""The dispatcher: claim due outbox rows under a lease, deliver them, record outcomes in batches.

Claims and outcome writes are short transactions on their own; no transaction
is open while an HTTP request is in flight. Outcomes are fenced on the claim's
lease token, so a dispatcher that stalled past its lease cannot overwrite the
work of the one that took the row over. A killed dispatcher simply stops
renewing nothing: its leases run out and the rows are due again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import asyncpg

from hookrelay.outbox import ids
from hookrelay.outbox.dispatch.attempt import AttemptLimits, AttemptResult, attempt
from hookrelay.outbox.dispatch.circuit import BreakerPolicy, take_probes
from hookrelay.outbox.dispatch.claim_ahead import AheadQueues, Waiting
from hookrelay.outbox.dispatch.host_rate import HostRate
from hookrelay.outbox.dispatch.outcomes import Recorder
from hookrelay.outbox.dispatch.retry import RetryPolicy
from hookrelay.outbox.dispatch.scheduler import (
    ANSWERED_S,
    HOLD_S,
    Caps,
    InFlight,
    Lane,
    ahead,
    allocate,
    held_hosts,
    still_due,
    with_hints,
)
from hookrelay.outbox.egress.http import Sender
from hookrelay.outbox.egress.local_faults import DEFER_S, FaultReporter
from hookrelay.outbox.egress.ssrf import AddressPolicy
from hookrelay.outbox.errors import ConfigurationError, LocalFault
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.keys.callback_headers import unseal
from hookrelay.outbox.keys.keyring import Keyring
from hookrelay.outbox.keys.master_key import key_matches
from hookrelay.outbox.keys.signing import Signer
from hookrelay.outbox.store import OUTBOX_CHANNEL, delivery
from hookrelay.outbox.store.delivery import ClaimedEvent, DueLane
from hookrelay.outbox.store.listener import Listener
from hookrelay.outbox.store.pool import TRANSIENT_ERRORS

log = logging.getLogger("hookrelay.dispatcher")
# Why an event whose tenant's signing secret does not decrypt is dead-lettered:
# unsigned it cannot be sent, and retrying cannot repair the stored secret.
UNDECRYPTABLE = "cannot decrypt signing secret (wrong master key or corrupted data)"
# Why an event is dead-lettered when its leases kept running out with nothing
# written: sent again, it would go round at every lease expiry for ever, unspent.
LOST_LEASES = (
    "outcome could not be recorded: {n} leases in a row ran out with no outcome written "
    "(a dispatcher crashed, the write failed, or the attempt failed with an error of "
    "ours); dead-lettered rather than sent again"
)
# Why an event is dead-lettered whose tenant has nothing that signs now (its
# secrets deleted by hand): unsigned it cannot be sent; a replay once a key is back.
NO_SIGNING_KEY = "the tenant has no active signing key"
# Why an event is dropped whose tenant is gone: nothing of the tenant's is kept.
# Deleting a tenant removes its waiting events (migration 0017); only rows left by
# a deletion before that are met here.
TENANT_GONE = "its tenant was deleted"
# Why an event is dropped whose stored body is gone: there is nothing to send.
# Only a database where an older release purged a task under its redelivery
# holds such a row; it used to fail its attempt every second for ever.
NO_BODY = "its stored event is gone (purged while it waited); nothing to send"
# Why an event is dead-lettered whose task's callback headers do not decrypt while
# this process's key is the database's: sent without them it would be refused, and
# retrying cannot repair them.
UNDECRYPTABLE_HEADERS = "cannot decrypt the task's callback headers (corrupted data)"
# After a failed claim: short, since the database usually comes back in moments
# and a long poll interval must not become the outage's recovery time.
CLAIM_RETRY_S = 0.5
# How often a dispatcher sweeps the ordering keys for one whose events all wait
# parked behind none (store.delivery.release_stuck_keys): only an event taken out of
# the outbox by a process of an earlier release, or by hand, leaves one so.
KEY_SWEEP_S = 30.0
# How many host caps' worth of a busy lane's rows may wait ahead of a free slot.
# Deeper, the claims are fewer and larger: one host at defaults, dispatcher CPU
# per delivery 98 µs at twice the cap, 94 µs at four times (alternating drains).
AHEAD_CAPS = 4


@dataclass(frozen=True)
class DispatcherConfig:
    """The dispatcher's knobs. These defaults are the only ones: the service's
    settings read theirs from here."""

    policy: RetryPolicy = field(default_factory=RetryPolicy)
    addresses: AddressPolicy = field(default_factory=AddressPolicy)
    limits: AttemptLimits = field(default_factory=AttemptLimits)
    lease_s: float = 30.0
    batch_size: int = 200
    concurrency: int = 200
    per_host_concurrency: int = 20
    # In-flight deliveries of one tenant while other tenants have due events.
    tenant_concurrency: int = 50
    poll_interval_s: float = 0.5
    # Consecutive failures to one host that open its circuit, and how often an
    # open circuit lets one probe through.
    breaker_threshold: int = BreakerPolicy.threshold
    breaker_probe_s: float = BreakerPolicy.probe_s
    # Leases of one event that may run out in a row with no outcome written (its
    # dispatcher crashed, or could not write the outcome) before the event is
    # dead-lettered instead of sent again (outbox.lost_leases). A killed dispatcher
    # costs the rows it held one each; an outcome that can never be stored costs
    # every lease, and would otherwise be re-sent for ever with no attempt spent.
    max_lost_leases: int = 5
    # Most requests a second to one host, across every dispatcher of the database
    # (HOOKRELAY_PER_HOST_RATE, dispatch.host_rate); None: no such limit.
    per_host_rate: float | None = None
    owner: str = field(default_factory=ids.lease_owner)

    @property
    def breaker(self) -> BreakerPolicy:
        return BreakerPolicy(self.breaker_threshold, self.breaker_probe_s)

    @property
    def caps(self) -> Caps:
        return Caps(self.concurrency, self.per_host_concurrency, self.tenant_concurrency)


class Dispatcher:
    """Runs until :meth:`stop`; ``counters`` says what it did."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        dsn: str,
        sender: Sender,
        secret_box: SecretBox,
        config: DispatcherConfig,
        *,
        owns_sender: bool = False,
    ) -> None:
        self.pool, self.dsn, self.sender, self.config = pool, dsn, sender, config
        self._owns_sender = owns_sender
        self._box = secret_box
        self.keyring = Keyring(secret_box)
        self.counters: Counter[str] = Counter()
        self.recorder = Recorder(
            pool,
            self.counters,
            batch_size=config.batch_size,
            breaker=config.breaker,
            on_handed=self._look,
        )
        self._loop: asyncio.AbstractEventLoop  # set when run() starts
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        # When the claim loop last went round (time.monotonic()): it does at least
        # once a poll interval, so a stale value means a loop stuck, not a quiet one.
        self.turned_at = time.monotonic()
        self._in_flight: dict[int, tuple[ClaimedEvent, asyncio.Task[None]]] = {}
        self._flight = InFlight.empty()
        # Claim after this many slots freed (or on a NOTIFY, a poll, an empty
        # pipeline): one round trip per few deliveries, not one per delivery.
        self._low_water = max(
            1, min(config.batch_size, config.concurrency, config.per_host_concurrency) // 4
        )
        self._freed = 0
        self._looked = True  # something may be due that no completion will reveal
        # Lanes the API of this process committed new events on since the last round
        # (``serve``, :meth:`wake`): claimed from directly, with no look at the due lanes.
        self._hinted: Counter[Lane] = Counter()
        self._next_probe_check = 0.0
        self._next_key_sweep = 0.0
        self._faults = FaultReporter(self.counters)
        self._lanes: list[DueLane] = []  # the last look at the due lanes, less what was taken
        # Rows leased ahead of a free slot (dispatch.claim_ahead): up to AHEAD_CAPS times a
        # host's cap, as one burst of replies can free a whole cap's worth while the
        # next claim is out; each sent within half the lease's slack beyond one
        # attempt's deadline, so its attempt ends well inside its lease.
        slack = config.lease_s - config.limits.total_timeout_s
        self._ahead = AheadQueues(
            AHEAD_CAPS * config.per_host_concurrency if slack > 0 else 0, max(0.0, slack / 2)
        )
        self._delivered_on: set[Lane] = set()  # lanes that delivered since the last round
        # When each host last answered (time.monotonic()), for the reserve's host
        # rule (dispatch.scheduler); hosts silent for longer than ANSWERED_S drop out.
        self._answered: dict[str, float] = {}
        self._refill = False  # a lane's rows ahead ran low
        # The cluster-wide rate per host, if set. A host its bucket held back is left
        # out of the claims until then (time.monotonic()), so it neither asks an empty
        # bucket in a loop nor holds up the claims for other hosts.
        self._rate = HostRate(config.per_host_rate) if config.per_host_rate else None
        self._rate_held: dict[str, float] = {}
        # The origin of the NOTIFYs of the API process that calls :meth:`wake` at each
        # of its commits of new events (``serve``): those NOTIFYs are ignored.
        self.woken_by: str | None = None

    # ------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Claim and deliver until stopped; returns after a graceful drain."""
        self._loop = asyncio.get_running_loop()
        # Any (re)connect may have missed a NOTIFY: wake and look, as on one.
        listener = Listener(
            self.dsn,
            {OUTBOX_CHANNEL: self._notified},
            on_gap=self._look,
            name="hookrelay-dispatcher-listen",
        )
        await listener.start()
        recorder = asyncio.create_task(self.recorder.run(), name="hookrelay-recorder")
        try:
            while not self._stopping.is_set():
                self.turned_at = time.monotonic()
                # Cleared before the flags are read, never after a round: a wake-up that
                # comes during the round (a NOTIFY, a hint) then ends the wait below.
                self._wake.clear()
                free = self._free_slots()
                await self._release(self._ahead.expired(time.monotonic()))
                if free > 0 and (
                    self._looked
                    or self._hinted
                    or self._refill
                    or self._freed >= self._low_water
                    or not self._in_flight
                ):
                    look, self._looked, self._freed, self._refill = self._looked, False, 0, False
                    try:
                        full = await self._claim_round(look)
                    except TRANSIENT_ERRORS as exc:
                        log.warning("claim failed, retrying: %s", exc)
                        full = False
                        await asyncio.sleep(min(CLAIM_RETRY_S, self.config.poll_interval_s))
                    except Exception:
                        # The loop must outlive any one bad round; leases make
                        # whatever it had claimed safe to abandon.
                        log.exception("claim round failed")
                        full = False
                        await asyncio.sleep(min(CLAIM_RETRY_S, self.config.poll_interval_s))
                    if full:
                        self._freed = self._low_water  # the batch size cut it short: go on
                        continue
                wait = self.config.poll_interval_s
                if self._rate_held:  # a host's bucket is refilling: look again once it has
                    wait = min(wait, max(0.0, min(self._rate_held.values()) - time.monotonic()))
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except TimeoutError:
                    self._looked = True  # the poll: rows due by the clock, missed NOTIFYs
        finally:
            await self._drain()
            await self.recorder.stop()
            await recorder
            await listener.stop()
            if self._owns_sender:
                await self.sender.aclose()
            log.info("dispatcher stopped", extra={"counters": dict(self.counters)})

    def _look(self) -> None:
        self._looked = True
        self._wake.set()

    def _notified(self, origin: str) -> None:
        # The NOTIFY of the process that wakes this dispatcher directly at each commit
        # (``serve``): already looked for, once per commit.
        if not origin or origin != self.woken_by:
            self._look()

    def wake(self, lane: Lane | None = None) -> None:
        """New events were committed: claim them now, not at the next poll.

        ``lane``: the (host, tenant) of the one event committed (``serve``'s API, at
        each commit): claimed from at once, with no read of every due lane first
        (one round trip, not two, per wake-up). None: look at every lane.
        """
        if lane is None:
            self._look()
            return
        self._hinted[lane] += 1
        self._wake.set()

    @property
    def stopping(self) -> bool:
        """:meth:`stop` was called: no more claims, :meth:`run` is finishing."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """Stop claiming; :meth:`run` finishes in-flight attempts and returns."""
        self._stopping.set()
        self._wake.set()

    async def _drain(self) -> None:
        """Let in-flight attempts finish within one attempt's deadline, then give rows back."""
        pending = [t for _, t in self._in_flight.values()]
        if pending:
            await asyncio.wait(pending, timeout=self.config.limits.total_timeout_s + 1)
        leftovers = [e for e, t in self._in_flight.values() if not t.done()]
        for _, t in self._in_flight.values():
            t.cancel()
        leftovers += self._ahead.clear()
        await self._release(leftovers)

    # --------------------------------------------------------------- claims

    def _free_slots(self) -> int:
        return self.config.concurrency - len(self._in_flight)

    async def _claim_round(self, look: bool) -> bool:
        """Claim and launch one round; True when the batch size, not the work, ended it.

        ``look``: read the due lanes afresh (a NOTIFY, a poll). Otherwise the
        lanes of the last look that still had rows due are claimed from
        directly: one round trip, not two, while a busy lane keeps freeing slots.
        """
        lease_s, owner, token = self.config.lease_s, self.config.owner, uuid.uuid4()
        async with self.pool.acquire() as conn:
            rows: list[ClaimedEvent] = []
            if time.monotonic() >= self._next_key_sweep:
                self._next_key_sweep = time.monotonic() + KEY_SWEEP_S
                if freed := await delivery.release_stuck_keys(conn):
                    log.warning("released %d ordering keys stuck behind no event", len(freed))
                    self.counters["keys_unstuck"] += len(freed)
                    look = True
            # One probe for each host whose open circuit is due one; looked for
            # once per poll interval, not on every claim of a busy dispatcher.
            if time.monotonic() >= self._next_probe_check:
                self._next_probe_check = time.monotonic() + self.config.poll_interval_s
                for host in await take_probes(conn, self.config.breaker):
                    rows += await delivery.claim_probe(
                        conn, host=host, lease_s=lease_s, owner=owner, token=token
                    )
                    self.counters["probes"] += 1
            upto = self.config.per_host_concurrency + self._ahead.depth
            lanes = self._lanes
            if self._hinted:
                if not look:
                    lanes = with_hints(lanes, self._hinted, datetime.now(UTC))
                self._hinted = Counter()
            if look or not lanes:
                lanes = await delivery.due_lanes(conn, upto=upto)
                if behind_open := held_hosts(lanes):
                    await delivery.hold_lanes(conn, hosts=behind_open, hold_s=HOLD_S)
            if self._rate_held:
                lanes = self._without_rate_held(lanes)
            caps = self.config.caps
            before = Counter(self._flight.lanes)
            grants = allocate(
                lanes,
                self._flight,
                caps,
                batch=self.config.batch_size,
                answering=self._answering(time.monotonic()),
            )
            extra = ahead(
                lanes,
                grants,
                self._flight,
                caps,
                waiting=self._ahead.waiting(),
                flowing=self._delivered_on,
                depth=self._ahead.depth,
            )
            self._delivered_on = set()
            asked = Counter(grants) + Counter(extra)
            limited = False
            if self._rate is not None and asked:
                # Only what the hosts' buckets grant is claimed; the rest stays due,
                # held, costing no attempt. Nothing is leased ahead: a row waiting
                # ahead would be sent later than its token was taken.
                asked, short = await self._rate.take(conn, Counter(grants))
                if short:
                    limited = True
                    self.counters["rate_limited"] += len(short)
                    until = time.monotonic() + self._rate.wait_s
                    self._rate_held.update(dict.fromkeys(short, until))
            claimed = await delivery.claim_lanes(
                conn,
                lanes=[(h, t, n) for (h, t), n in asked.items() if n > 0],
                lease_s=lease_s,
                owner=owner,
                token=token,
            )
            if self._rate is not None and asked:
                await self._rate.give_back(conn, asked, claimed)
            self._lanes = still_due(lanes, asked, claimed, upto=upto)
            probes = len(rows)
            rows += claimed
            full = not limited and sum(grants.values()) >= self.config.batch_size
            if any(self._unsendable(e) for e in rows):
                probes, rows = await self._abandon(conn, rows, probes)
            if not rows:
                return full
            tenants: dict[str, int] = {e.tenant_id: e.secret_version for e in rows}
            signers = await self.keyring.signers(conn, tenants)
            # A secret that does not decrypt is that tenant's problem, unless
            # this process's key is no longer the database's (rotated while we
            # ran): then nothing is the events' fault, so hold them, not bury them.
            keyless = self.keyring.keyless
            own_key_ok = len(signers) + len(keyless) == len(tenants) or await key_matches(
                conn, self._box
            )
            rows, sealed_bad = self._open_headers(rows)
            headers_key_ok = not sealed_bad or await key_matches(conn, self._box)
        self.counters["claimed"] += len(rows)
        held: list[ClaimedEvent] = []
        now = time.monotonic()
        # Each lane starts what its grant allows, plus the slots it freed while
        # the claim was out (found nothing waiting ahead); the rest of its rows
        # wait ahead. Probes are not part of any grant: they always start.
        startable = Counter(grants)
        for lane, n in before.items():
            startable[lane] += max(0, n - self._flight.lanes[lane])
        for i, event in enumerate(rows):
            signer = signers.get(event.tenant_id)
            if signer is None and event.tenant_id in keyless:
                self.recorder.add(
                    AttemptResult(event, "dead", datetime.now(UTC), 0.0, error=NO_SIGNING_KEY)
                )
                self.counters["no_signing_key"] += 1
                continue
            if (signer is None and not own_key_ok) or (
                event.id in sealed_bad and not headers_key_ok
            ):
                held.append(event)
                continue
            if event.id in sealed_bad:
                self.recorder.add(
                    AttemptResult(
                        event, "dead", datetime.now(UTC), 0.0, error=UNDECRYPTABLE_HEADERS
                    )
                )
                self.counters["undecryptable_headers"] += 1
                continue
            if signer is None:
                self.recorder.add(
                    AttemptResult(event, "dead", datetime.now(UTC), 0.0, error=UNDECRYPTABLE)
                )
                self.counters["undecryptable"] += 1
                continue
            lane = (event.host, event.tenant_id)
            if i >= probes and startable[lane] <= 0:
                self._ahead.put(event, signer, now)
                self.counters["claimed_ahead"] += 1
                continue
            startable[lane] -= 1
            self._flight.add(event.host, event.tenant_id)
            self._launch(event, signer)
        if held:
            log.error(
                "this process's master key (id %s) no longer matches the database's; "
                "holding %d events: restart it with the current HOOKRELAY_MASTER_KEY",
                self._box.key_id,
                len(held),
            )
            self.counters["held_wrong_key"] += len(held)
            await self._release(held)
            return False  # held rows wait a poll interval, not claimed again at once
        return full

    def _without_rate_held(self, lanes: list[DueLane]) -> list[DueLane]:
        """``lanes`` less those of hosts the rate holds back now; a hold that ended is
        forgotten, and the next round looks at the due lanes afresh for its rows."""
        now = time.monotonic()
        for host, until in list(self._rate_held.items()):
            if until <= now:
                del self._rate_held[host]
                self._looked = True
        return [lane for lane in lanes if lane.host not in self._rate_held]

    def _open_headers(self, rows: list[ClaimedEvent]) -> tuple[list[ClaimedEvent], set[int]]:
        """``rows`` with their tasks' callback headers opened, and the ids of those whose
        headers did not decrypt."""
        bad: set[int] = set()
        if not any(e.headers_enc for e in rows):
            return rows, bad
        opened = []
        for event in rows:
            if event.headers_enc and event.task_id is not None:
                try:
                    headers = unseal(self._box, event.task_id, event.headers_enc)
                except (ConfigurationError, ValueError):
                    bad.add(event.id)
                else:
                    event = replace(event, callback_headers=headers)
            opened.append(event)
        return opened, bad

    def _unsendable(self, event: ClaimedEvent) -> str | None:
        """Why ``event`` is not to be sent, if it is not."""
        if event.lost_leases >= self.config.max_lost_leases:
            return LOST_LEASES.format(n=event.lost_leases)
        if event.secret_version is None:  # read with the claim: no such tenant
            return TENANT_GONE
        if event.body is None:
            return NO_BODY
        return None

    async def _abandon(
        self, conn: asyncpg.Connection, rows: list[ClaimedEvent], probes: int
    ) -> tuple[int, list[ClaimedEvent]]:
        """Dead-letter, unsent, the rows not to be sent (see ``_unsendable``);
        returns (probes, rows) left to send."""
        why = {e.id: reason for e in rows if (reason := self._unsendable(e)) is not None}
        try:
            keys = {e.id: key for e in rows if e.id in why and (key := e.key) is not None}
            done = await delivery.abandon_leases(
                conn, rows=list(why.items()), token=rows[0].token, keys=keys
            )
        except Exception:
            # Not sent either way: their leases run out and the next claim tries again.
            log.exception("could not dead-letter %d events not to be sent", len(why))
            done = {}
        for e in rows:
            if e.id in done:
                log.error(
                    "event %s: %s",
                    "dead-lettered" if done[e.id] else "dropped",
                    why[e.id],
                    extra={"event_id": e.event_id, "task_id": e.task_id},
                )
        self.counters["abandoned"] += len(done)
        kept = [e for e in rows[:probes] if e.id not in why]
        return len(kept), kept + [e for e in rows[probes:] if e.id not in why]

    def _answering(self, now: float) -> set[str]:
        """The hosts that answered within ANSWERED_S; the others are forgotten."""
        quiet = [h for h, at in self._answered.items() if now - at > ANSWERED_S]
        for host in quiet:
            del self._answered[host]
        return set(self._answered)

    async def _release(self, events: list[ClaimedEvent]) -> None:
        if not events:
            return
        by_token: dict[uuid.UUID, list[int]] = {}
        for e in events:
            by_token.setdefault(e.token, []).append(e.id)
        try:
            async with self.pool.acquire() as conn:
                for token, row_ids in by_token.items():
                    await delivery.release_leases(conn, ids=row_ids, token=token)
            self.counters["released"] += len(events)
        except Exception as exc:  # the leases run out by themselves
            log.warning("could not release %d leases: %s", len(events), exc)

    # ------------------------------------------------------------- delivery

    def _launch(self, event: ClaimedEvent, signer: Signer) -> None:
        task = self._loop.create_task(self._deliver(event, signer))
        self._in_flight[event.id] = (event, task)

    async def _deliver(self, event: ClaimedEvent, signer: Signer) -> None:
        """Deliver ``event``, then, while its lane has rows waiting ahead, the next one
        in the same task: a busy lane's slot is one task, not one per attempt."""
        task = self._in_flight[event.id][1]
        while True:
            try:
                await self._attempt(event, signer, task)
            finally:
                self._in_flight.pop(event.id, None)
                following = self._next(event)
            if following is None:
                return
            event, signer = following.event, following.signer
            self._in_flight[event.id] = (event, task)

    async def _attempt(self, event: ClaimedEvent, signer: Signer, task: asyncio.Task[None]) -> None:
        try:
            result = await attempt(
                self.sender,
                event,
                signer,
                self.config.policy,
                self.config.addresses,
                self.config.limits,
                loop=self._loop,
                task=task,
            )
        except LocalFault as fault:
            await self._give_back(event, fault)
            return
        except Exception as exc:  # a bug of ours is not the receiver's fault either
            log.exception("attempt failed unexpectedly", extra={"event_id": event.event_id})
            await self._give_back(event, LocalFault("bug", f"{type(exc).__name__}: {exc}"))
            return
        self.recorder.add(result)
        if result.status_code is not None:
            self._answered[event.host] = time.monotonic()
        if result.outcome == "delivered":
            self._delivered_on.add((event.host, event.tenant_id))
        if log.isEnabledFor(logging.DEBUG):  # its extra dict is not built otherwise
            log.debug(
                "attempt %s",
                result.outcome,
                extra={"event_id": event.event_id, "task_id": event.task_id},
            )

    def _next(self, done: ClaimedEvent) -> Waiting | None:
        """A slot came free: the lane's next row waiting ahead takes it (returned, for
        the caller to send), if any."""
        lane = (done.host, done.tenant_id)
        # Stopping: nothing new starts; _drain gives the waiting rows back.
        waiting = None if self._stopping.is_set() else self._ahead.take(lane, time.monotonic())
        if waiting is not None:
            # Same lane, so the lane, host and tenant counts stay as they are.
            if self._ahead.low(lane) and not self._refill:
                self._refill = True
                self._wake.set()
            return waiting
        self._flight.remove(done.host, done.tenant_id)
        self._freed += 1
        if self._freed >= self._low_water or not self._in_flight:
            self._wake.set()
        return None

    async def _give_back(self, event: ClaimedEvent, fault: LocalFault) -> None:
        """Our fault, not the receiver's: the row goes back unspent (see ``local_faults``)."""
        self._faults.report(fault, event.event_id)
        try:
            async with self.pool.acquire() as conn:
                await delivery.defer_leases(
                    conn,
                    ids=[event.id],
                    token=event.token,
                    delay_s=DEFER_S,
                    # A bug may fail this event's attempt every time: counted, bounded.
                    counted=fault.kind == "bug",
                )
        except Exception as exc:  # the lease runs out by itself
            log.warning("could not give back event %s: %s", event.event_id, exc)


@contextlib.asynccontextmanager
async def running(dispatcher: Dispatcher) -> AsyncIterator[Dispatcher]:
    """Run ``dispatcher`` in the background for the duration of the block."""
    task = asyncio.create_task(dispatcher.run(), name="hookrelay-dispatcher")
    try:
        yield dispatcher
    finally:
        dispatcher.stop()
        await task
