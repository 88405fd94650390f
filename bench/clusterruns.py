"""The cluster scenarios: a drain over 1..N hosts, a host lost, a host partitioned, a failover.

Each takes a started :class:`~bench.clusterhosts.Cluster`, runs on real processes and
returns what it counted; ``python -m bench cluster`` prints and records the figures,
``tests/cluster`` asserts the invariants on small counts. Nothing here asserts a time.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx

from bench.clusterhosts import ADMIN, AppHost, Cluster, Database, poll
from bench.clusterload import Load
from bench.common import seconds_to_drain

DRAIN_TIMEOUT_S = 600.0


async def _fetchval(dsn: str, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


async def _outbox_empty(db: Database) -> bool:
    try:
        return bool(await _fetchval(db.dsn, "SELECT NOT EXISTS (SELECT 1 FROM outbox)"))
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return False


async def _leased_by(db: Database, owner: str | None) -> int:
    return int(
        await _fetchval(
            db.dsn,
            "SELECT count(*) FROM outbox WHERE lease_token IS NOT NULL AND lease_owner = $1",
            owner,
        )
    )


@dataclass
class Ledger:
    """The end state, from the database and the receiver, for the invariants."""

    events: int  # events committed (rows in ``events``)
    requests: int  # requests the receiver had
    unique: int  # distinct webhook-ids among them
    missing: int  # committed events the receiver never had
    forgotten: int  # events the receiver had that the database no longer holds (a lost commit)
    outbox_left: int
    undelivered_tasks: int  # terminal tasks whose delivery is not "delivered"
    attempt_rows: int
    numbers_twice: int  # (event, attempt number) pairs recorded more than once
    delivered_twice: int  # events with more than one "delivered" attempt row

    @property
    def duplicates(self) -> int:
        return self.requests - self.unique

    @property
    def lost(self) -> int:
        return self.missing + self.outbox_left


async def ledger(c: Cluster, db: Database) -> Ledger:
    rx = await c.rx_stats(ids=True)
    conn = await asyncpg.connect(db.dsn)
    try:
        committed = {r[0] for r in await conn.fetch("SELECT event_id FROM events")}
        row = await conn.fetchrow(
            """
            SELECT (SELECT count(*) FROM outbox) AS outbox_left,
                   (SELECT count(*) FROM tasks WHERE event_id IN (SELECT event_id FROM events)
                       AND delivery_status <> 'delivered') AS undelivered,
                   (SELECT count(*) FROM delivery_attempts) AS attempt_rows,
                   (SELECT count(*) FROM (SELECT 1 FROM delivery_attempts
                       GROUP BY event_id, number HAVING count(*) > 1) d) AS numbers_twice,
                   (SELECT count(*) FROM (SELECT 1 FROM delivery_attempts
                       WHERE outcome = 'delivered'
                       GROUP BY event_id HAVING count(*) > 1) d) AS delivered_twice
            """
        )
    finally:
        await conn.close()
    seen = set(rx["ids"])
    return Ledger(
        events=len(committed),
        requests=int(rx["requests"]),
        unique=int(rx["unique"]),
        missing=len(committed - seen),
        forgotten=len(seen - committed),
        outbox_left=row["outbox_left"],
        undelivered_tasks=row["undelivered"],
        attempt_rows=row["attempt_rows"],
        numbers_twice=row["numbers_twice"],
        delivered_twice=row["delivered_twice"],
    )


async def make_tenant(app: AppHost) -> str:
    async with httpx.AsyncClient(base_url=app.api, timeout=30) as h:
        r = await h.post("/v1/admin/tenants", json={"name": "cluster"}, headers=ADMIN)
        r.raise_for_status()
        return str(r.json()["apiKey"])


async def submit_wave(c: Cluster, app: AppHost, key: str, n: int) -> None:
    """``n`` tasks submitted and completed through ``app``'s API, each answered 2xx."""
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=app.api, timeout=60) as h:
        for _ in range(n):
            r = await h.post("/v1/tasks", json={"type": "t", "callbackUrl": c.rx_url}, headers=auth)
            r.raise_for_status()
            done = await h.post(
                f"/v1/tasks/{r.json()['id']}/complete", json={"status": "succeeded"}, headers=ADMIN
            )
            done.raise_for_status()


async def rejoins(
    c: Cluster, db: Database, app: AppHost, key: str, wave: int, timeout: float = 120
) -> int:
    """Waves through ``app``'s API until its dispatcher delivers some; its deliveries.

    Every dispatcher shares each wave, and one coming back from an outage may need a few
    seconds (TCP retransmission backs off) before it claims again: waves until then.
    """
    before = await c.delivered_by(app)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await submit_wave(c, app, key, wave)
        await poll(lambda: _outbox_empty(db), DRAIN_TIMEOUT_S, "the wave delivered", every=0.1)
        if (got := await c.delivered_by(app) - before) > 0:
            return got
    return 0


# ---------------------------------------------------------------------------- scale


@dataclass
class ScaleRun:
    hosts: int
    events: int
    seconds: float
    per_host: list[int]
    ledger: Ledger
    max_number: int
    pg_cpu_s: float
    dispatch_cpu_s: float
    wal_bytes: int

    @property
    def rate(self) -> float:
        return self.events / self.seconds

    @property
    def pg_ms_per_1000(self) -> float:
        return self.pg_cpu_s * 1000 / self.events * 1000

    @property
    def dispatch_ms_per_1000(self) -> float:
        return self.dispatch_cpu_s * 1000 / self.events * 1000


async def scale(c: Cluster, events: int, hosts: int) -> ScaleRun:
    """Drain ``events`` with ``hosts`` app hosts (api + dispatch each), from a fresh database."""
    await c.restart_receiver(0.0)
    db = await c.create_database(f"scale_{hosts}_{time.monotonic_ns()}")
    await c.fill(db, events)
    apps = c.apps[:hosts]
    earlier = [app.counters()["delivered"] for app in apps]  # the hosts' earlier runs
    for app in apps:
        c.start_app(app, db, roles=("api",))
    for app in apps:
        await c.wait_started(app)
    conn = await asyncpg.connect(db.dsn)
    try:
        pg_before = c.pg_cpu_s()
        wal_before = await conn.fetchval("SELECT pg_current_wal_lsn()")
        for app in apps:
            c.start_app(app, db, roles=("dispatch",))
        seconds = await asyncio.wait_for(seconds_to_drain(conn), DRAIN_TIMEOUT_S)
        pg_cpu = c.pg_cpu_s() - pg_before
        dispatch_cpu = sum(app.procs["dispatch"].cpu_s() for app in apps)
        max_number = await conn.fetchval("SELECT max(number) FROM delivery_attempts")
        wal = await conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1)", wal_before)
    finally:
        await conn.close()
    for app in apps:
        c.stop_app(app)
    return ScaleRun(
        hosts=hosts,
        events=events,
        seconds=seconds,
        per_host=[app.counters()["delivered"] - n for app, n in zip(apps, earlier, strict=True)],
        ledger=await ledger(c, db),
        max_number=max_number,
        pg_cpu_s=pg_cpu,
        dispatch_cpu_s=dispatch_cpu,
        wal_bytes=int(wal),
    )


# ------------------------------------------------------------------------ lost host


@dataclass
class LostHost:
    events: int
    lease_s: float
    killed_processes: int
    leased_at_kill: int  # rows the lost host held: the bound on duplicates
    delivered_before_kill: int  # requests the receiver had from it
    ledger: Ledger
    seconds_to_empty: float  # from the kill to an empty outbox
    rejoined_deliveries: int  # after it came back, deliveries it made


def lossy_settings(lease_s: float) -> dict[str, object]:
    """Short leases and small batches, so a fault leaves rows leased and they come back soon."""
    return {
        "lease_s": lease_s,
        "http_timeout_s": 1,
        "concurrency": 50,
        "per_host_concurrency": 50,
        "batch_size": 50,
        "poll_interval_s": 0.2,
        "retry_base_s": 0.2,
        "retry_cap_s": 1,
    }


async def lost_host(
    c: Cluster, events: int, *, lease_s: float = 3.0, rx_delay_s: float = 0.2, wave: int = 100
) -> LostHost:
    """Kill every process of h2 mid-drain; the others finish; h2 comes back and works."""
    await c.restart_receiver(rx_delay_s)
    db = await c.create_database(f"lost_{time.monotonic_ns()}")
    await c.fill(db, events)
    settings = lossy_settings(lease_s)
    for app in c.apps:
        c.start_app(app, db, settings)
    for app in c.apps:
        await c.wait_started(app)
    key = await make_tenant(c.apps[0])
    victim = c.apps[1]
    owner = victim.owner()

    async def working() -> bool:  # a tenth of the way through, with rows in hand
        n = max(1, events // 10)
        return await c.delivered_by(victim) >= n and await _leased_by(db, owner) > 0

    await poll(working, DRAIN_TIMEOUT_S, f"{victim.name} delivering")
    delivered_before = await c.delivered_by(victim)
    killed = c.kill_app(victim)
    killed_at = time.monotonic()
    leased = await _leased_by(db, owner)
    await poll(lambda: _outbox_empty(db), DRAIN_TIMEOUT_S, "outbox empty after the loss", every=0.1)
    seconds = time.monotonic() - killed_at
    first = await ledger(c, db)
    # Back, as a supervisor would restart it: no lease to clear, nothing to configure.
    c.start_app(victim, db, settings)
    await c.wait_started(victim)
    rejoined = await rejoins(c, db, victim, key, wave)
    for app in c.apps:
        c.stop_app(app)
    final = await ledger(c, db)
    return LostHost(
        events=events,
        lease_s=lease_s,
        killed_processes=killed,
        leased_at_kill=leased,
        delivered_before_kill=delivered_before,
        ledger=_first_with_final_log(first, final),
        seconds_to_empty=seconds,
        rejoined_deliveries=rejoined,
    )


def _first_with_final_log(first: Ledger, final: Ledger) -> Ledger:
    """The drain's receiver counts, with the attempt-log checks of the very end."""
    return Ledger(
        events=first.events,
        requests=first.requests,
        unique=first.unique,
        missing=first.missing + final.missing,
        forgotten=first.forgotten,
        outbox_left=final.outbox_left,
        undelivered_tasks=final.undelivered_tasks,
        attempt_rows=final.attempt_rows,
        numbers_twice=final.numbers_twice,
        delivered_twice=final.delivered_twice,
    )


# ------------------------------------------------------------------------ partition


@dataclass
class Partition:
    events: int
    lease_s: float
    leased_at_cut: int
    seconds_cut: float
    counters: dict[str, Counter[str]]  # host name -> its dispatcher's counters
    ledger: Ledger
    rejoined_deliveries: int

    @property
    def stale(self) -> int:
        """Outcomes refused by the fencing token, every host."""
        return sum(c["stale"] for c in self.counters.values())

    @property
    def outcomes(self) -> int:
        """Every attempt's outcome as the dispatchers counted it, refused ones too."""
        return sum(
            c[k] for c in self.counters.values() for k in ("delivered", "retry", "dead", "stale")
        )


async def partition(
    c: Cluster, events: int, *, lease_s: float = 2.0, rx_delay_s: float = 0.3, wave: int = 50
) -> Partition:
    """Cut h1 from PostgreSQL while it holds leases, for longer than a lease, then mend it."""
    await c.restart_receiver(rx_delay_s)
    db = await c.create_database(f"partition_{time.monotonic_ns()}")
    await c.fill(db, events)
    settings = {**lossy_settings(lease_s), "concurrency": 20, "per_host_concurrency": 20}
    for app in c.apps:
        c.start_app(app, db, settings)
    for app in c.apps:
        await c.wait_started(app)
    key = await make_tenant(c.apps[0])
    victim = c.apps[0]
    owner = victim.owner()

    async def holding() -> bool:
        return await _leased_by(db, owner) > 0 and await c.delivered_by(victim) > 0

    await poll(holding, DRAIN_TIMEOUT_S, f"{victim.name} holding leases")
    c.net.set_link(victim.host, "db", up=False)
    cut_at = time.monotonic()
    leased = await _leased_by(db, owner)
    # The others take its rows once their leases end; the cut outlasts a lease, and ends
    # only when the drain is done, so every stale outcome of h1 has been superseded.
    await poll(lambda: _outbox_empty(db), DRAIN_TIMEOUT_S, "drained around the cut", every=0.1)
    await poll(lambda: time.monotonic() - cut_at > 2 * lease_s, 4 * lease_s, "cut > 2 leases")
    c.net.set_link(victim.host, "db", up=True)
    seconds_cut = time.monotonic() - cut_at
    # Its outcomes are written in order, so once it delivers new work the stale ones
    # before it have been tried (and refused).
    rejoined = await rejoins(c, db, victim, key, wave)
    for app in c.apps:
        c.stop_app(app)
    return Partition(
        events=events,
        lease_s=lease_s,
        leased_at_cut=leased,
        seconds_cut=seconds_cut,
        counters={app.name: app.counters() for app in c.apps},
        ledger=await ledger(c, db),
        rejoined_deliveries=rejoined,
    )


# ------------------------------------------------------------------------- failover


@dataclass
class Failover:
    mode: str  # "sync" or "async" replication
    submitted_ok: int  # submits answered 2xx
    completed_ok: int  # completes answered 2xx
    lost_submits: int  # answered 2xx, not on the new primary
    lost_completes: int  # answered 2xx, not terminal on the new primary
    leased_at_failover: int  # leased rows on the standby when it took over: the duplicates' bound
    ready_503: list[str]  # APIs seen answering /readyz 503 with no writable server
    outage_s: float  # primary killed -> promote called
    promote_s: float  # pg_ctl promote -w
    api_ready_s: list[float]  # promoted -> /readyz 200, each API
    api_write_s: list[float]  # promoted -> first 2xx submit or complete, each API
    delivery_s: float  # promoted -> first webhook of an event committed after it
    busiest_cpu_share: float  # the busiest hookrelay process's CPU share while no primary
    processes_alive: bool
    exit_codes: list[int]
    failures: Counter[str]
    ledger: Ledger
    lag_s: float = 0.0  # how long the standby was cut off before the primary died
    acked_in_lag: int = 0  # submits + completes answered 2xx while it was cut off
    reconciled: Reconciled | None = None  # with a lag: the partner's reconciliation


@dataclass
class Reconciled:
    """A partner's reconciliation after losing writes: the listing against its own records."""

    listed: int  # tasks the status listing showed
    missing: int  # tasks answered 2xx at submit that the listing does not show
    regressed: int  # completes answered 2xx whose task the listing shows not terminal
    resubmitted: int  # missing tasks submitted again, answered 2xx
    recompleted: int  # completions done again (regressed, and missing ones that were done)
    delivered: int  # of the completions done again, webhooks the receiver then had


async def failover(
    c: Cluster,
    *,
    before: int,
    after: int,
    lease_s: float | None = None,
    hold_s: float = 2.0,
    vanish: bool = False,
    lag_s: float = 0.0,
) -> Failover:
    """Traffic through every API; SIGKILL the primary; promote the standby; count.

    ``lag_s``: the standby's link goes down that long before the primary dies, traffic
    going on, so an asynchronous standby misses what was committed meanwhile (the
    replication lag a slow link or a busy standby gives, made long enough to count).
    The partner then reconciles through the status listing (:func:`reconcile`).

    ``vanish``: its link goes down first, so not even a TCP reset reaches the clients,
    as when the primary's machine is gone rather than its server. Finding its
    connections dead then takes about 10 s, and a lease shorter than that and the
    reconnect would have rows in flight sent again: 20 s then (the default is 30 s).
    """
    lease_s = lease_s if lease_s is not None else (20.0 if vanish else 3.0)
    assert len(c.pg) == 2 and c.standby, "a failover needs a cluster with a standby"
    await c.restart_receiver(0.0)
    db = await c.create_database(f"failover_{time.monotonic_ns()}")
    settings = lossy_settings(lease_s)
    for app in c.apps:
        c.start_app(app, db, settings)
    for app in c.apps:
        await c.wait_started(app)
    key = await make_tenant(c.apps[0])
    load = Load([app.api for app in c.apps], key, c.rx_url)
    load.start()
    try:
        await poll(lambda: len(load.completed) >= before, DRAIN_TIMEOUT_S, "traffic before")
        procs = [p for app in c.apps for p in app.procs.values()]
        cpu_before = [p.cpu_s() for p in procs]
        acked_before = len(load.submitted) + len(load.completed)
        if lag_s:
            c.net.set_link(c.pg[1].host, "db", up=False)
            await asyncio.sleep(lag_s)
        acked_in_lag = len(load.submitted) + len(load.completed) - acked_before
        killed_at = time.monotonic()
        if vanish:
            c.net.set_link(c.pg[0].host, "db", up=False)
        c.pg[0].kill()
        if lag_s:
            c.net.set_link(c.pg[1].host, "db", up=True)
        ready_503 = []
        for app in c.apps:
            await poll(lambda app=app: _is(c.ready(app), 503), 60, f"{app.name} /readyz 503")
            ready_503.append(app.name)
        await poll(lambda: time.monotonic() - killed_at >= hold_s, hold_s + 5, "outage held")
        standby = c.pg[1].dsn(db.name)
        leased = await _leased_on_standby(standby)
        cpu_share = max(
            (p.cpu_s() - b) / (time.monotonic() - killed_at)
            for p, b in zip(procs, cpu_before, strict=True)
        )
        outage = time.monotonic() - killed_at
        promote_at = time.monotonic()
        c.pg[1].promote()
        promoted = time.monotonic()
        api_ready = []
        for app in c.apps:
            await poll(lambda app=app: _is(c.ready(app), 200), 120, f"{app.name} /readyz 200")
            api_ready.append(time.monotonic() - promoted)
        api_write = []
        for app in c.apps:
            await poll(lambda app=app: load.answered_since(app.api, promoted), 120, "writes again")
            api_write.append(load.last_ok[app.api] - promoted)
        await poll(lambda: load.completed_since(promoted) >= 1, 120, "a completion after")
        first_after = min((t, task) for task, t in load.completed_at.items() if t >= promoted)[1]
        event = load.completed[first_after]
        await poll(lambda: _received(c, event), 120, "a delivery after the failover")
        delivery = time.monotonic() - promoted
        await poll(lambda: load.completed_since(promoted) >= after, DRAIN_TIMEOUT_S, "after")
    finally:
        await load.stop()
    await poll(lambda: _outbox_empty(db), DRAIN_TIMEOUT_S, "outbox empty after failover")
    alive = all(p.alive() for app in c.apps for p in app.procs.values())
    conn = await asyncpg.connect(db.dsn)
    try:
        present = {r[0] for r in await conn.fetch("SELECT id FROM tasks")}
        terminal = {
            r[0] for r in await conn.fetch("SELECT id FROM tasks WHERE status = 'succeeded'")
        }
    finally:
        await conn.close()
    reconciled = await reconcile(c, db, load) if lag_s else None
    codes = []
    for app in c.apps:
        procs_now = list(app.procs.values())
        c.stop_app(app)
        codes += [p.popen.returncode for p in procs_now]
    return Failover(
        mode=c.standby,
        submitted_ok=len(load.submitted),
        completed_ok=len(load.completed),
        lost_submits=len(set(load.submitted) - present),
        lost_completes=len(set(load.completed) - terminal),
        leased_at_failover=leased,
        ready_503=ready_503,
        outage_s=outage,
        promote_s=promoted - promote_at,
        api_ready_s=api_ready,
        api_write_s=api_write,
        delivery_s=delivery,
        busiest_cpu_share=cpu_share,
        processes_alive=alive,
        exit_codes=codes,
        failures=load.failures,
        ledger=await ledger(c, db),
        lag_s=lag_s,
        acked_in_lag=acked_in_lag,
        reconciled=reconciled,
    )


async def reconcile(c: Cluster, db: Database, load: Load) -> Reconciled:
    """What a partner does after a failover that lost writes, and what it gets back.

    It pages the status listing (the source of truth) and holds it against its own
    records: a task it was given an id for that the listing lacks is submitted again; a
    task its executor completed (answered 2xx) that the listing shows unfinished is
    completed again. Each redone completion commits a new event; the receiver must then
    have every one of them.
    """
    auth = {"Authorization": f"Bearer {load.key}"}
    listed: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=c.apps[0].api, timeout=60) as h:
        cursor: str | None = None
        while True:
            params = {"limit": "500", "fields": "status", **({"cursor": cursor} if cursor else {})}
            page = (await h.get("/v1/tasks", params=params, headers=auth)).raise_for_status()
            listed |= {t["id"]: t["status"] for t in page.json()["data"]}
            if not (cursor := page.json()["nextCursor"]):
                break
        missing = [task for task in load.submitted if task not in listed]
        regressed = [
            task for task in load.completed if task in listed and listed[task] != "succeeded"
        ]
        to_complete = list(regressed)
        for task in missing:
            r = await h.post("/v1/tasks", json={"type": "t", "callbackUrl": c.rx_url}, headers=auth)
            r.raise_for_status()
            if task in load.completed:  # else it waits for its executor, as it did
                to_complete.append(r.json()["id"])
        redone: list[str] = []  # the events of the completions done again
        for task in to_complete:
            done = await h.post(
                f"/v1/tasks/{task}/complete", json={"status": "succeeded"}, headers=ADMIN
            )
            done.raise_for_status()
            redone.append(done.json()["delivery"]["eventId"])
    await poll(lambda: _outbox_empty(db), DRAIN_TIMEOUT_S, "outbox empty after reconciling")
    seen = set((await c.rx_stats(ids=True))["ids"])
    return Reconciled(
        listed=len(listed),
        missing=len(missing),
        regressed=len(regressed),
        resubmitted=len(missing),
        recompleted=len(redone),
        delivered=sum(1 for event in redone if event in seen),
    )


async def _leased_on_standby(dsn: str) -> int:
    """Rows leased on the standby once it has replayed all it received: what it takes over."""
    conn = await asyncpg.connect(dsn)
    try:
        caught_up = "SELECT pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn()"
        await poll(lambda: conn.fetchval(caught_up), 60, "the standby replayed what it had")
        return int(await conn.fetchval("SELECT count(*) FROM outbox WHERE lease_token IS NOT NULL"))
    finally:
        await conn.close()


async def _is(status: Any, want: int) -> bool:
    return bool(await status == want)


async def _received(c: Cluster, event_id: str) -> bool:
    return event_id in (await c.rx_stats(ids=True))["ids"]
