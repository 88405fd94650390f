"""``/metrics``: process counters plus database gauges read at scrape time."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookrelay.outbox.store import destinations
from hookrelay.outbox.store import metrics as gauges
from hookrelay.service.api.auth import require_metrics_reader

# A running task this long without a sign of life is probably stuck.
STUCK_AFTER_S = 600.0


async def metrics(request: Request) -> Response:
    require_metrics_reader(request)
    # Database gauges live in a registry built per scrape, so series of a
    # tenant or status that no longer exist disappear instead of going stale.
    scrape = CollectorRegistry()
    depth = Gauge("hookrelay_outbox_depth", "Events waiting in the outbox", registry=scrape)
    oldest = Gauge(
        "hookrelay_outbox_oldest_due_seconds",
        "How long the oldest due event has been waiting",
        registry=scrape,
    )
    dead = Gauge(
        "hookrelay_dead_letters", "Dead letters not yet replayed", ["tenant"], registry=scrape
    )
    tasks = Gauge("hookrelay_tasks", "Tasks by status", ["status"], registry=scrape)
    open_ = Gauge(
        "hookrelay_destination_open",
        "1 while a host's circuit is open or half-open",
        ["host"],
        registry=scrape,
    )
    failing = Gauge(
        "hookrelay_destination_consecutive_failures",
        "Consecutive failed attempts to a host",
        ["host"],
        registry=scrape,
    )
    xact = Gauge(
        "hookrelay_db_oldest_transaction_seconds",
        "Age of the oldest open transaction in the database (it holds back vacuum)",
        registry=scrape,
    )
    stuck = Gauge(
        "hookrelay_tasks_stuck",
        f"Running tasks with no start or progress report for over {STUCK_AFTER_S:g} s",
        registry=scrape,
    )
    silent = Gauge(
        "hookrelay_tasks_running_oldest_silence_seconds",
        "Longest time a running task has gone without a start or progress report",
        registry=scrape,
    )
    async with request.app.state.pool.acquire() as conn:
        xact.set(await gauges.oldest_transaction_s(conn))
        stale = await gauges.stale_running_tasks(conn, after_s=STUCK_AFTER_S)
        stuck.set(stale.count)
        silent.set(stale.oldest_s)
        stats = await gauges.outbox_stats(conn)
        depth.set(stats.depth)
        oldest.set(stats.oldest_due_s)
        for tenant, n in (await gauges.dead_letters_by_tenant(conn)).items():
            dead.labels(tenant).set(n)
        for status, n in (await gauges.tasks_by_status(conn)).items():
            tasks.labels(status).set(n)
        for d in await destinations.list_destinations(conn, limit=1000):
            open_.labels(d.host).set(d.state != "closed")
            failing.labels(d.host).set(d.consecutive_failures)
    body = generate_latest(REGISTRY) + generate_latest(scrape)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


routes = [Route("/metrics", metrics, methods=["GET"])]
