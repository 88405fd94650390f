"""Process metrics of the delivery path (Prometheus); the API exposes them on /metrics."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

DELIVERIES = Counter(
    "hookrelay_deliveries",
    "Delivery attempts recorded, by outcome "
    "(delivered, retry, dead; stale = dropped by the lease fence)",
    ["outcome"],
)
ATTEMPT_SECONDS = Histogram(
    "hookrelay_attempt_duration_seconds",
    "Duration of one delivery attempt",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30),
)
LOCAL_FAULTS = Counter(
    "hookrelay_local_faults",
    "Attempts abandoned for a fault of our own (resolver, file descriptors, HTTP pool, egress "
    "proxy, bug); "
    "the event was given back without spending an attempt",
    ["kind"],
)
