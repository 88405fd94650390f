"""The one settings object, read from the environment and validated at start-up."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from hookrelay.outbox.dispatch import AttemptLimits, BreakerPolicy, DispatcherConfig, RetryPolicy
from hookrelay.outbox.egress import DNS_SUBMIT_TIMEOUT_S, DNS_TIMEOUT_S, AddressPolicy
from hookrelay.outbox.errors import ConfigurationError
from hookrelay.outbox.keys import parse_master_key
from hookrelay.outbox.tasks import Retention

# The numeric settings: int or float, and comparable with 0.
N = TypeVar("N", int, float)
# Where ``hookrelay dispatch`` serves /metrics, /healthz and /readyz unless
# HOOKRELAY_METRICS_PORT says otherwise: the Prometheus exporter port OpenTelemetry
# uses, well away from the API's 8000 and the ports next to it that more API
# processes on one host would take.
METRICS_PORT = 9464
# HOOKRELAY_METRICS_PORT values that mean "serve nothing".
METRICS_OFF = frozenset({"off", "0"})
SECRET_FIELDS = frozenset({"admin_token", "master_key", "metrics_token"})


class SettingsError(ConfigurationError):
    """One or more environment variables are invalid; the message lists each."""


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError("expected true or false")


def _positive(kind: Callable[[str], N]) -> Callable[[str], N]:
    def parse(raw: str) -> N:
        value = kind(raw)
        if not value > 0:
            raise ValueError("must be greater than 0")
        return value

    return parse


def _migrate_mode(raw: str) -> Literal["auto", "off"]:
    value = raw.lower()
    if value == "auto":
        return "auto"
    if value == "off":
        return "off"
    raise ValueError("expected auto or off")


def _metrics_port(raw: str) -> int | None:
    """A port 1..65535, or None for ``off`` (or ``0``): no metrics server."""
    if raw.lower() in METRICS_OFF:
        return None
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise ValueError("expected a port number 1..65535, or off")
    return port


def _mask_dsn(dsn: str | None) -> str | None:
    return None if dsn is None else re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)


def _dsn_problems(dsn: str) -> list[str]:
    """What is wrong with DATABASE_URL's form, named without its password."""
    shown = _mask_dsn(dsn)
    try:
        parts = urlsplit(dsn)
        # Several servers (``postgresql://u@a:5432,b:5432/db?target_session_attrs=
        # read-write``, as libpq and asyncpg take them): each port is checked alone.
        userinfo, _, hosts = parts.netloc.rpartition("@")
        for host in hosts.split(","):
            one = parts._replace(netloc=f"{userinfo}@{host}" if userinfo else host)
            one.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return [f"DATABASE_URL={shown!r}: {exc}"]
    if parts.scheme not in {"postgresql", "postgres"}:
        return [f"DATABASE_URL={shown!r}: expected postgresql://user:password@host:port/database"]
    return []


@dataclass(frozen=True)
class Settings:
    """Every setting. Defaults that the outbox also uses are read from its config
    classes, so each number is written once."""

    database_url: str | None = None
    data_dir: Path = Path(".hookrelay")
    admin_token: str | None = None
    metrics_token: str | None = None
    master_key: str | None = None
    allow_private_cidrs: str = ""
    allow_http: bool = False
    retry_base_s: float = RetryPolicy.base_s
    retry_cap_s: float = RetryPolicy.cap_s
    max_attempts: int = RetryPolicy.max_attempts
    lease_s: float = DispatcherConfig.lease_s
    http_timeout_s: float = AttemptLimits.total_timeout_s
    connect_timeout_s: float = 5.0
    dns_submit_timeout_s: float = DNS_SUBMIT_TIMEOUT_S
    dns_timeout_s: float = DNS_TIMEOUT_S
    dns_servers: str = ""
    concurrency: int = DispatcherConfig.concurrency
    per_host_concurrency: int = DispatcherConfig.per_host_concurrency
    tenant_concurrency: int = DispatcherConfig.tenant_concurrency
    secret_overlap_s: float = 86400.0
    sweep_interval_s: float = 1.0
    batch_size: int = DispatcherConfig.batch_size
    poll_interval_s: float = DispatcherConfig.poll_interval_s
    max_body_bytes: int = 1_048_576
    max_response_bytes: int = AttemptLimits.max_response_bytes
    db_pool_size: int = 10
    db_wait_s: float = 30.0
    breaker_threshold: int = BreakerPolicy.threshold
    breaker_probe_s: float = BreakerPolicy.probe_s
    attempt_retention_s: float = Retention.attempts_s
    task_retention_s: float = Retention.tasks_s
    host: str = "127.0.0.1"
    port: int = 8000
    # ``hookrelay dispatch``'s own HTTP port (None: it serves none).
    metrics_port: int | None = METRICS_PORT
    # API worker processes of ``serve`` and ``api`` sharing the port (also ``--workers N``).
    # None: the command's default, ``api`` one per usable CPU (at most 4) and ``serve`` 1
    # (service/server/supervisor.py, default_workers, says why).
    workers: int | None = None
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 1000
    max_page_bytes: int = 4 * 1_048_576
    # Status streams (SSE and WebSocket): open at once per tenant and API process,
    # the comment heartbeat, and how long the change log keeps what they resume from.
    streams_per_tenant: int = 500
    stream_heartbeat_s: float = 15.0
    stream_retention_s: float = Retention.changes_s
    # GET /v1/ws: the auth message's deadline, the ping interval (protocol and
    # application pings; an unanswered protocol ping drops the client after another
    # interval) and the task ids one socket may follow.
    ws_auth_timeout_s: float = 30.0
    ws_ping_s: float = 30.0
    ws_max_subscriptions: int = 1000
    log_level: str = "INFO"
    # "auto": a process applies missing migrations at start; "off": it never runs DDL
    # (DML rights are enough) and refuses a schema older than it needs.
    migrate: Literal["auto", "off"] = "auto"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read every ``HOOKRELAY_*`` variable (and ``DATABASE_URL``).

        Raises :class:`SettingsError` naming every bad variable at once.
        """
        env = os.environ if env is None else env
        parsers: dict[str, tuple[str, Callable[[str], Any]]] = {
            "database_url": ("DATABASE_URL", str),
            "data_dir": ("HOOKRELAY_DATA_DIR", Path),
            "admin_token": ("HOOKRELAY_ADMIN_TOKEN", str),
            "metrics_token": ("HOOKRELAY_METRICS_TOKEN", str),
            "master_key": ("HOOKRELAY_MASTER_KEY", str),
            "allow_private_cidrs": ("HOOKRELAY_ALLOW_PRIVATE_CIDRS", str),
            "allow_http": ("HOOKRELAY_ALLOW_HTTP", _bool),
            "retry_base_s": ("HOOKRELAY_RETRY_BASE_S", _positive(float)),
            "retry_cap_s": ("HOOKRELAY_RETRY_CAP_S", _positive(float)),
            "max_attempts": ("HOOKRELAY_MAX_ATTEMPTS", _positive(int)),
            "lease_s": ("HOOKRELAY_LEASE_S", _positive(float)),
            "http_timeout_s": ("HOOKRELAY_HTTP_TIMEOUT_S", _positive(float)),
            "connect_timeout_s": ("HOOKRELAY_CONNECT_TIMEOUT_S", _positive(float)),
            "dns_submit_timeout_s": ("HOOKRELAY_DNS_SUBMIT_TIMEOUT_S", _positive(float)),
            "dns_timeout_s": ("HOOKRELAY_DNS_TIMEOUT_S", _positive(float)),
            "dns_servers": ("HOOKRELAY_DNS_SERVERS", str),
            "concurrency": ("HOOKRELAY_CONCURRENCY", _positive(int)),
            "per_host_concurrency": ("HOOKRELAY_PER_HOST_CONCURRENCY", _positive(int)),
            "tenant_concurrency": ("HOOKRELAY_TENANT_CONCURRENCY", _positive(int)),
            "secret_overlap_s": ("HOOKRELAY_SECRET_OVERLAP_S", float),
            "sweep_interval_s": ("HOOKRELAY_SWEEP_INTERVAL_S", _positive(float)),
            "batch_size": ("HOOKRELAY_BATCH_SIZE", _positive(int)),
            "poll_interval_s": ("HOOKRELAY_POLL_INTERVAL_S", _positive(float)),
            "max_body_bytes": ("HOOKRELAY_MAX_BODY_BYTES", _positive(int)),
            "max_response_bytes": ("HOOKRELAY_MAX_RESPONSE_BYTES", _positive(int)),
            "db_pool_size": ("HOOKRELAY_DB_POOL_SIZE", _positive(int)),
            "db_wait_s": ("HOOKRELAY_DB_WAIT_S", _positive(float)),
            "breaker_threshold": ("HOOKRELAY_BREAKER_THRESHOLD", _positive(int)),
            "breaker_probe_s": ("HOOKRELAY_BREAKER_PROBE_S", _positive(float)),
            "attempt_retention_s": ("HOOKRELAY_ATTEMPT_RETENTION_S", _positive(float)),
            "task_retention_s": ("HOOKRELAY_TASK_RETENTION_S", _positive(float)),
            "host": ("HOOKRELAY_HOST", str),
            "port": ("HOOKRELAY_PORT", _positive(int)),
            "metrics_port": ("HOOKRELAY_METRICS_PORT", _metrics_port),
            "workers": ("HOOKRELAY_WORKERS", _positive(int)),
            "header_timeout_s": ("HOOKRELAY_HEADER_TIMEOUT_S", _positive(float)),
            "body_timeout_s": ("HOOKRELAY_BODY_TIMEOUT_S", _positive(float)),
            "max_connections": ("HOOKRELAY_MAX_CONNECTIONS", _positive(int)),
            "max_page_bytes": ("HOOKRELAY_MAX_PAGE_BYTES", _positive(int)),
            "streams_per_tenant": ("HOOKRELAY_STREAMS_PER_TENANT", _positive(int)),
            "stream_heartbeat_s": ("HOOKRELAY_STREAM_HEARTBEAT_S", _positive(float)),
            "stream_retention_s": ("HOOKRELAY_STREAM_RETENTION_S", _positive(float)),
            "ws_auth_timeout_s": ("HOOKRELAY_WS_AUTH_TIMEOUT_S", _positive(float)),
            "ws_ping_s": ("HOOKRELAY_WS_PING_S", _positive(float)),
            "ws_max_subscriptions": ("HOOKRELAY_WS_MAX_SUBSCRIPTIONS", _positive(int)),
            "log_level": ("HOOKRELAY_LOG_LEVEL", str.upper),
            "migrate": ("HOOKRELAY_MIGRATE", _migrate_mode),
        }
        values: dict[str, Any] = {}
        problems: list[str] = []
        for name, (var, parse) in parsers.items():
            raw = env.get(var)
            if raw is None or (raw.strip() == "" and name not in {"allow_http"}):
                continue
            try:
                values[name] = parse(raw.strip())
            except ValueError as exc:
                shown = "***" if name in SECRET_FIELDS else repr(raw)
                problems.append(f"{var}={shown}: {exc}")
        settings = cls(**values)
        problems.extend(settings._cross_checks())
        if problems:
            raise SettingsError("invalid settings:\n  " + "\n  ".join(problems))
        return settings

    def _cross_checks(self) -> list[str]:
        problems = []
        for check in (self.retry_policy, self.address_policy):
            try:
                check()
            except ConfigurationError as exc:
                problems.append(str(exc))
        if self.master_key is not None:
            try:
                parse_master_key(self.master_key)
            except ConfigurationError as exc:
                problems.append(f"HOOKRELAY_MASTER_KEY: {exc}")
        if self.lease_s <= self.http_timeout_s:
            # A lease shorter than one attempt would let a second dispatcher
            # take a row that is still being sent.
            problems.append(
                f"HOOKRELAY_LEASE_S ({self.lease_s:g}) must be longer than "
                f"HOOKRELAY_HTTP_TIMEOUT_S ({self.http_timeout_s:g})"
            )
        if self.database_url is not None:
            problems.extend(_dsn_problems(self.database_url))
        if not 0 < self.port < 65536:
            problems.append(f"HOOKRELAY_PORT={self.port}: expected 1..65535")
        if self.secret_overlap_s < 0:
            problems.append("HOOKRELAY_SECRET_OVERLAP_S must not be negative")
        if self.log_level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            problems.append(f"HOOKRELAY_LOG_LEVEL={self.log_level!r}: expected DEBUG..ERROR")
        return problems

    def retention(self) -> Retention:
        return Retention(
            attempts_s=self.attempt_retention_s,
            tasks_s=self.task_retention_s,
            changes_s=self.stream_retention_s,
        )

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.retry_base_s, self.retry_cap_s, self.max_attempts)

    def nameservers(self) -> list[str]:
        """``HOOKRELAY_DNS_SERVERS`` as a list; empty means the system's resolv.conf."""
        return [n.strip() for n in self.dns_servers.split(",") if n.strip()]

    def address_policy(self) -> AddressPolicy:
        return AddressPolicy.from_settings(self.allow_private_cidrs, self.allow_http)

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in SECRET_FIELDS and value is not None:
                value = "***"
            elif f.name == "database_url":
                value = _mask_dsn(value)
            shown.append(f"{f.name}={value!r}")
        return f"Settings({', '.join(shown)})"
