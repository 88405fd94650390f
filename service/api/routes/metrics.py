"""``/metrics``: the processes' counters and histograms, and database gauges read at scrape time.

One process (``serve`` or ``api`` with one worker, ``dispatch``) shows its own registry,
with prometheus_client's process and Python collectors. With several workers
(service/server/supervisor.py) every process writes its counters and histograms to the
supervisor's directory (``PROMETHEUS_MULTIPROC_DIR``), and a scrape, whichever worker
answers it, shows the sums. Every series, and how it stays whole across workers:

- ``hookrelay_deliveries_total``, ``hookrelay_local_faults_total`` (counters) and
  ``hookrelay_attempt_duration_seconds`` (histogram, hookrelay/outbox/metrics.py): the
  dispatcher's, summed over processes (``serve`` runs one dispatcher process);
- ``hookrelay_http_requests_total{code}``: the API's responses, summed over the workers;
- the database gauges below: read from the database by the worker that answers, the
  same whichever does. They are built per scrape as metric families, never as
  ``Gauge`` objects, which in multiprocess mode would be written to the shared files
  and outlive the scrape;
- ``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ``process_open_fds``:
  with several workers, the supervisor's and every worker's added up (CPU of workers
  that were replaced included); ``process_start_time_seconds`` is the supervisor's, and
  ``hookrelay_processes`` counts them. ``python_gc_*`` and ``python_info`` describe one
  interpreter and are left out then.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

import psutil
from prometheus_client import REGISTRY, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hookrelay.outbox.store import destinations
from hookrelay.outbox.store import metrics as gauges
from hookrelay.service.api.auth import require_metrics_reader

# A running task this long without a sign of life is probably stuck.
STUCK_AFTER_S = 600.0

REQUESTS = Counter(
    "hookrelay_http_requests",
    "HTTP responses of the API, by status code (summed over its worker processes)",
    ["code"],
)


class ResponseCounter:
    """ASGI middleware counting every HTTP response in ``hookrelay_http_requests_total``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._by_code: dict[int, Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                code = message["status"]
                child = self._by_code.get(code)
                if child is None:
                    child = self._by_code[code] = REQUESTS.labels(str(code))
                child.inc()
            await send(message)

        await self.app(scope, receive, counted)


class ProcessTree(Collector):
    """``process_*`` of a supervisor and its workers, added up."""

    def __init__(self, root_pid: int) -> None:
        self._root = psutil.Process(root_pid)

    def collect(self) -> Iterable[Metric]:
        cpu = rss = fds = 0.0
        count = 0
        with contextlib.suppress(psutil.Error):
            children = self._root.children()
        for i, proc in enumerate([self._root, *children]):
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    cpu += times.user + times.system
                    if i == 0:  # the children it has reaped: workers that were replaced
                        cpu += times.children_user + times.children_system
                    rss += proc.memory_info().rss
                    fds += proc.num_fds()
                count += 1
            except psutil.Error:  # exited meanwhile
                continue
        yield CounterMetricFamily(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds, by the supervisor and its workers",
            value=cpu,
        )
        yield GaugeMetricFamily(
            "process_resident_memory_bytes",
            "Resident memory size in bytes, of the supervisor and its workers",
            value=rss,
        )
        yield GaugeMetricFamily(
            "process_open_fds",
            "Open file descriptors, of the supervisor and its workers",
            value=fds,
        )
        yield GaugeMetricFamily(
            "process_start_time_seconds",
            "Start time of the supervisor since unix epoch in seconds",
            value=self._root.create_time(),
        )
        yield GaugeMetricFamily(
            "hookrelay_processes", "The supervisor and its worker processes", value=count
        )


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def _registry(request: Request) -> CollectorRegistry:
    """This process's registry, or the sums over every worker (built once per app)."""
    state = request.app.state
    registry: CollectorRegistry | None = getattr(state, "metrics_registry", None)
    if registry is None:
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if directory is None:
            registry = REGISTRY
        else:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
            root = getattr(state, "process_tree", None)
            if root is not None:
                registry.register(ProcessTree(root))
        state.metrics_registry = registry
    return registry


async def _database_gauges(request: Request) -> list[Metric]:
    def gauge(name: str, documentation: str, labels: list[str] | None = None) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, documentation, labels=labels)
        found.append(family)
        return family

    found: list[Metric] = []
    depth = gauge("hookrelay_outbox_depth", "Events waiting in the outbox")
    oldest = gauge(
        "hookrelay_outbox_oldest_due_seconds", "How long the oldest due event has been waiting"
    )
    dead = gauge("hookrelay_dead_letters", "Dead letters not yet replayed", ["tenant"])
    tasks = gauge("hookrelay_tasks", "Tasks by status", ["status"])
    open_ = gauge(
        "hookrelay_destination_open", "1 while a host's circuit is open or half-open", ["host"]
    )
    failing = gauge(
        "hookrelay_destination_consecutive_failures",
        "Consecutive failed attempts to a host",
        ["host"],
    )
    xact = gauge(
        "hookrelay_db_oldest_transaction_seconds",
        "Age of the oldest open transaction in the database (it holds back vacuum)",
    )
    stuck = gauge(
        "hookrelay_tasks_stuck",
        f"Running tasks with no start or progress report for over {STUCK_AFTER_S:g} s",
    )
    silent = gauge(
        "hookrelay_tasks_running_oldest_silence_seconds",
        "Longest time a running task has gone without a start or progress report",
    )
    async with request.app.state.pool.acquire() as conn:
        xact.add_metric([], await gauges.oldest_transaction_s(conn))
        stale = await gauges.stale_running_tasks(conn, after_s=STUCK_AFTER_S)
        stuck.add_metric([], stale.count)
        silent.add_metric([], stale.oldest_s)
        stats = await gauges.outbox_stats(conn)
        depth.add_metric([], stats.depth)
        oldest.add_metric([], stats.oldest_due_s)
        for tenant, n in (await gauges.dead_letters_by_tenant(conn)).items():
            dead.add_metric([tenant], n)
        for status, n in (await gauges.tasks_by_status(conn)).items():
            tasks.add_metric([status], n)
        for d in await destinations.list_destinations(conn, limit=1000):
            open_.add_metric([d.host], float(d.state != "closed"))
            failing.add_metric([d.host], d.consecutive_failures)
    return found


async def metrics(request: Request) -> Response:
    require_metrics_reader(request)
    # Read per scrape, so series of a tenant, status or host that no longer exist
    # disappear instead of going stale.
    scrape = CollectorRegistry()
    scrape.register(_Families(await _database_gauges(request)))
    body = generate_latest(_registry(request)) + generate_latest(scrape)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


routes = [Route("/metrics", metrics, methods=["GET"])]
