"""The release this process runs, as ``hookrelay --version`` and ``/healthz`` name it."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import Gauge


@cache
def release() -> str:
    """The installed hookrelay-server's version."""
    try:
        return version("hookrelay-server")
    except PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        return "unknown"


# Always 1; its label names the release, so a dashboard can tell which processes of a
# fleet run what during a rolling upgrade. Registered with the process's metrics, so
# the API's /metrics and dispatch's (HOOKRELAY_METRICS_PORT) both serve it. With several
# workers (service/server/supervisor.py) every worker writes it: "max" shows one series
# per release, not one per worker's pid.
BUILD_INFO = Gauge(
    "hookrelay_build_info",
    "The release this process runs (the value is always 1)",
    ["version"],
    multiprocess_mode="max",
)
BUILD_INFO.labels(release()).set(1)
