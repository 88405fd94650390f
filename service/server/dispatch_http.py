"""``hookrelay dispatch``'s own port (``HOOKRELAY_METRICS_PORT``): /metrics, /healthz, /readyz.

Run apart from the API, a dispatcher's counters (deliveries, attempt durations,
local faults) could be read nowhere: only the API served ``/metrics``, and those
are per process. So ``dispatch`` serves the API's own handlers for these three
routes, with the same credentials for ``/metrics``, on a small Starlette app
that uvicorn runs in the dispatcher's event loop (no thread). A scrape reads
the database gauges through the dispatcher's pool, as the API's reads its own.
``/readyz`` also checks that the claim loop is alive.

The port stays open while the dispatcher drains after SIGTERM (``/readyz`` then
answers 503) and closes once it has.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable

import asyncpg
from starlette.applications import Starlette
from starlette.middleware import Middleware

from hookrelay.outbox.dispatch import Dispatcher
from hookrelay.service.api.errors import HANDLERS
from hookrelay.service.api.request_guard import GuardMiddleware
from hookrelay.service.api.routes import health, metrics
from hookrelay.service.server import event_loop as serving
from hookrelay.service.server import lifecycle
from hookrelay.service.server.lifecycle import Stopping
from hookrelay.service.server.settings import Settings

log = logging.getLogger("hookrelay")

# Scrapers and probes, not the public: a few connections are plenty.
MAX_CONNECTIONS = 64
# How long open scrapes may take to finish once the dispatcher has stopped.
GRACEFUL_S = 5
PORT_SETTING = "HOOKRELAY_METRICS_PORT (one per dispatcher on a host, or off)"


def bind(settings: Settings) -> socket.socket:
    """The metrics port, bound before anything else starts: a busy one fails at once."""
    assert settings.metrics_port is not None, "HOOKRELAY_METRICS_PORT is off"
    return lifecycle.bind(
        settings.host,
        settings.metrics_port,
        host_setting="HOOKRELAY_HOST",
        port_setting=PORT_SETTING,
    )


def create_app(
    settings: Settings, *, admin_token: str, pool: asyncpg.Pool, readiness: health.Readiness
) -> Starlette:
    """The API's /metrics, /healthz and /readyz over ``pool``, and ``readiness`` before
    the database check of /readyz."""
    app = Starlette(
        routes=[*health.routes, *metrics.routes],
        exception_handlers=HANDLERS,
        middleware=[Middleware(GuardMiddleware)],
    )
    app.router.redirect_slashes = False
    app.state.settings = settings
    # "" when this process knows no admin token: then only HOOKRELAY_METRICS_TOKEN
    # reads /metrics (a bearer token is never empty, so "" matches none).
    app.state.admin_token = admin_token
    app.state.pool = pool
    app.state.readiness = readiness
    return app


def claim_loop_readiness(
    dispatcher: Dispatcher, running: Callable[[], asyncio.Task[None] | None]
) -> health.Readiness:
    """Not ready before the dispatcher runs, once it has stopped or is stopping, or when
    its claim loop has not gone round for a whole lease (it does every poll interval,
    even with nothing to do)."""
    stall_s = dispatcher.config.lease_s

    def check() -> str | None:
        task = running()
        if task is None:
            return "the dispatcher is starting"
        if task.done():
            return "the dispatcher has stopped"
        if dispatcher.stopping:
            return "the dispatcher is stopping"
        quiet_s = time.monotonic() - dispatcher.turned_at
        if quiet_s > stall_s:
            return f"the dispatcher's claim loop has not gone round for {quiet_s:.0f} s"
        return None

    return check


async def run_beside(
    dispatcher: Dispatcher,
    *,
    pool: asyncpg.Pool,
    sock: socket.socket,
    settings: Settings,
    admin_token: str,
    stopping: Stopping,
    announce: Callable[[], None],
) -> None:
    """Serve the endpoints on ``sock``, then run ``dispatcher`` until it has drained,
    then close the port. ``announce`` is called once the port accepts."""
    task: asyncio.Task[None] | None = None
    app = create_app(
        settings,
        admin_token=admin_token,
        pool=pool,
        readiness=claim_loop_readiness(dispatcher, lambda: task),
    )
    port = sock.getsockname()[1]
    config = serving.uvicorn_config(
        app,
        host=settings.host,
        port=port,
        graceful_s=GRACEFUL_S,
        limits=serving.ConnectionLimits(
            header_timeout_s=settings.header_timeout_s,
            body_timeout_s=settings.body_timeout_s,
            keep_alive_s=settings.keep_alive_s,
            max_connections=MAX_CONNECTIONS,
        ),
    )
    listening = asyncio.Event()
    server = lifecycle.Server(config, on_listening=listening.set)
    # The first signal stops the dispatcher (the caller's on_stop); the port closes
    # after its drain. A second one closes open scrapes without waiting.
    stopping.on_force(server.force)
    http = asyncio.create_task(server.serve(sockets=[sock]), name="hookrelay-metrics-http")
    try:
        up = asyncio.ensure_future(listening.wait())
        await asyncio.wait((up, http), return_when=asyncio.FIRST_COMPLETED)
        up.cancel()
        if not listening.is_set():
            await http  # raises what stopped it, if anything did
            raise RuntimeError(f"the server on HOOKRELAY_METRICS_PORT={port} did not start")
        announce()
        task = asyncio.create_task(dispatcher.run(), name="hookrelay-dispatcher")
        await asyncio.wait((task, http), return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            # Never expected: without its probes the dispatcher would be restarted
            # blind anyway, so stop it and say why.
            log.error("the server on HOOKRELAY_METRICS_PORT=%d stopped; stopping", port)
            dispatcher.stop()
            await task
            await http
            raise RuntimeError(f"the server on HOOKRELAY_METRICS_PORT={port} stopped")
        await task  # the dispatcher's own failure, if it failed
    finally:
        if task is not None and not task.done():  # cancelled from outside
            dispatcher.stop()
            await asyncio.shield(task)
        server.stop()
        await http
