"""Background parts of a process: the dispatcher and the timeout sweeper, wired from settings."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

import asyncpg

from outbox.delivery import AttemptLimits
from outbox.dispatcher import Dispatcher, DispatcherConfig, running
from outbox.http import build_sender
from outbox.sweeper import sweeping

from .runtime import Runtime


def dispatcher_config(runtime: Runtime) -> DispatcherConfig:
    s = runtime.settings
    return DispatcherConfig(
        policy=s.retry_policy(),
        addresses=s.address_policy(),
        limits=AttemptLimits(
            total_timeout_s=s.http_timeout_s, max_response_bytes=s.max_response_bytes
        ),
        lease_s=s.lease_s,
        batch_size=s.batch_size,
        concurrency=s.concurrency,
        per_host_concurrency=s.per_host_concurrency,
        tenant_concurrency=s.tenant_concurrency,
        poll_interval_s=s.poll_interval_s,
        breaker_threshold=s.breaker_threshold,
        breaker_probe_s=s.breaker_probe_s,
    )


def make_dispatcher(runtime: Runtime, pool: asyncpg.Pool) -> Dispatcher:
    config = dispatcher_config(runtime)
    s = runtime.settings
    sender = build_sender(
        config.addresses,
        concurrency=s.concurrency,
        per_host=s.per_host_concurrency,
        connect_timeout_s=s.connect_timeout_s,
        dns_timeout_s=s.dns_timeout_s,
        nameservers=s.nameservers(),
    )
    return Dispatcher(pool, runtime.dsn, sender, runtime.secret_box, config, owns_sender=True)


def dispatcher_background(
    runtime: Runtime,
) -> Callable[[asyncpg.Pool], contextlib.AbstractAsyncContextManager[Dispatcher]]:
    """A ``Background`` for :func:`service.app.create_app`."""

    @contextlib.asynccontextmanager
    async def run(pool: asyncpg.Pool) -> AsyncIterator[Dispatcher]:
        async with running(make_dispatcher(runtime, pool)) as dispatcher:
            yield dispatcher

    return run


def sweeper_background(
    runtime: Runtime,
) -> Callable[[asyncpg.Pool], contextlib.AbstractAsyncContextManager[None]]:
    """The timeout sweeper as a ``Background``."""

    def run(pool: asyncpg.Pool) -> contextlib.AbstractAsyncContextManager[None]:
        return sweeping(pool, runtime.settings.sweep_interval_s, runtime.settings.retention())

    return run
