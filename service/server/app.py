"""The Starlette application: the API's routes, the live streams' routes and the ops
console mounted together, error handlers, and the resources they share."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence

import asyncpg
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from hookrelay.outbox.egress import Resolver
from hookrelay.outbox.store import Listener
from hookrelay.outbox.tasks import GroupCommit
from hookrelay.service import console, portal
from hookrelay.service.api import openapi
from hookrelay.service.api import tracing as api_tracing
from hookrelay.service.api.auth import KeyCache, revocations
from hookrelay.service.api.errors import HANDLERS
from hookrelay.service.api.hot_path import HotPath
from hookrelay.service.api.request_guard import GuardMiddleware
from hookrelay.service.api.routes import (
    admin,
    deadletters,
    destinations,
    docs,
    health,
    metrics,
    notifications,
    signing_keys,
    tasks,
    testevents,
)
from hookrelay.service.api.tracing import TracingMiddleware
from hookrelay.service.console.security import SignInThrottle
from hookrelay.service.live import StreamHub, sse_routes, ws_routes
from hookrelay.service.live.long_poll import TaskWatcher
from hookrelay.service.live.wakeups import Signals
from hookrelay.service.server.prerequisites import Runtime

log = logging.getLogger("hookrelay.api")

# Started beside the API (``hookrelay serve``); each gets the pool and the
# process's after-commit signals and returns an async context manager that runs
# it until exit.
Background = Callable[[asyncpg.Pool, Signals], contextlib.AbstractAsyncContextManager[object]]


def create_app(
    runtime: Runtime,
    *,
    pool: asyncpg.Pool | None = None,
    background: Sequence[Background] = (),
) -> Starlette:
    """Build the app; it opens its own pool at startup unless one is given."""
    settings = runtime.settings

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        own = pool is None
        app.state.pool = pool or await runtime.open_pool()
        # The API's writes, coalesced into one statement per burst (outbox.tasks.group_commit).
        app.state.writes = GroupCommit(app.state.pool, box=runtime.secret_box)
        app.state.watcher.start()
        await app.state.hub.start(app.state.pool)
        app.state.signals = signals = Signals(app.state.hub, app.state.watcher)
        # Once every part that reads it has its pool: a (re)connect calls each one's gap.
        await app.state.listener.start()
        try:
            async with contextlib.AsyncExitStack() as stack:
                for start in background:
                    await stack.enter_async_context(start(app.state.pool, signals))
                yield
        finally:
            log.info("group commit: %s", app.state.writes.counters())
            await app.state.listener.stop()
            await app.state.hub.stop()
            await app.state.submit_resolver.close()
            if own:
                await app.state.pool.close()

    app = Starlette(
        routes=[
            *health.routes,
            *metrics.routes,
            *tasks.routes,
            *sse_routes.routes,
            *admin.routes,
            *signing_keys.routes,
            *testevents.routes,
            *deadletters.routes,
            *notifications.routes,
            *destinations.routes,
            *openapi.routes,
            *docs.routes,
            *ws_routes.routes,
            Route("/ops", console.entry, methods=["GET"]),
            console.mount(runtime.admin_token),
            *portal.routes(runtime.admin_token),
        ],
        exception_handlers=HANDLERS,
        middleware=[
            # Outermost, so a request the guard refuses has its span too.
            *([Middleware(TracingMiddleware)] if api_tracing.configure() else []),
            Middleware(GuardMiddleware),
            # Innermost: submit, complete and a task's status skip the router.
            Middleware(HotPath, routes=tasks.routes),
        ],
        lifespan=lifespan,
    )
    # /v1/tasks/ is a 404, not a redirect built from the client's Host header.
    app.router.redirect_slashes = False
    app.state.settings = settings
    app.state.admin_token = runtime.admin_token
    app.state.key_cache = KeyCache()
    app.state.ops_throttle = SignInThrottle()
    # One LISTEN connection per process, shared by the stream hub, the long polls and
    # the API keys' revocations (hookrelay.outbox.store.listener says why).
    app.state.listener = listener = Listener(runtime.listen_dsn, {}, name="hookrelay-api")
    # One per process: its reads serve every SSE and WebSocket stream.
    app.state.hub = StreamHub(listener, per_tenant=settings.streams_per_tenant)
    app.state.watcher = TaskWatcher(listener)
    revocations(app.state.key_cache, listener)
    app.state.secret_box = runtime.secret_box
    app.state.address_policy = settings.address_policy()
    # Submit-time lookups have their own resolver and deadline, apart from the
    # dispatcher's, so neither can hold the other's lookups up.
    app.state.submit_resolver = Resolver(
        timeout_s=settings.dns_submit_timeout_s, nameservers=settings.nameservers()
    )
    return app
