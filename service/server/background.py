"""Background parts of a process: the dispatcher and the timeout sweeper, wired from settings.

In ``serve`` the dispatcher runs on an event loop of its own, in a thread of the
same process (DESIGN.md keeps ``serve`` one process). On the API's loop every
step of a delivery (claim, send, read the answer, record) waited behind what
the API had queued: ``python -m bench serve_latency`` on a loaded machine gave
complete→receipt p50 1.2 to 1.5 s, p99 2.5 to 3.4 s at 300 to 430
completions/s; on its own loop, in the same minutes, p50 35 to 39 ms, p99 95 to
152 ms. The dispatcher then waits at most for the interpreter to switch
threads. Its database pool is its own: an asyncpg pool belongs to one loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable

import asyncpg

from hookrelay.outbox.dispatch import AttemptLimits, Dispatcher, DispatcherConfig
from hookrelay.outbox.egress import build_sender
from hookrelay.outbox.tasks import sweeping
from hookrelay.service.api import tracing as api_tracing
from hookrelay.service.live.wakeups import Signals
from hookrelay.service.server import event_loop as serving
from hookrelay.service.server.prerequisites import Runtime


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
        per_host_rate=s.per_host_rate,
    )


def make_dispatcher(runtime: Runtime, pool: asyncpg.Pool) -> Dispatcher:
    config = dispatcher_config(runtime)
    s = runtime.settings
    # Spans of the attempts when OTEL_EXPORTER_OTLP_* asks for them (and the extra is in).
    api_tracing.configure()
    sender = build_sender(
        config.addresses,
        concurrency=s.concurrency,
        per_host=s.per_host_concurrency,
        connect_timeout_s=s.connect_timeout_s,
        dns_timeout_s=s.dns_timeout_s,
        nameservers=s.nameservers(),
        tls=s.tls_context(),
        proxy=s.egress_proxy_config(),
    )
    return Dispatcher(
        pool, runtime.listen_dsn, sender, runtime.secret_box, config, owns_sender=True
    )


class _DispatcherThread(threading.Thread):
    """Runs a dispatcher, with a pool of its own, on a new event loop."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__(name="hookrelay-dispatcher", daemon=True)
        self._runtime = runtime
        self.up = threading.Event()  # running, or failed before it could
        self.dispatcher: Dispatcher | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            serving.run(self._main())
        except BaseException as exc:  # raised again in the API's loop at exit
            self.error = exc
        finally:
            self.up.set()

    async def _main(self) -> None:
        pool = await self._runtime.open_pool()
        try:
            self.dispatcher = make_dispatcher(self._runtime, pool)
            self.loop = asyncio.get_running_loop()
            self.up.set()
            await self.dispatcher.run()
        finally:
            await pool.close()


def dispatcher_background(
    runtime: Runtime,
) -> Callable[[asyncpg.Pool, Signals], contextlib.AbstractAsyncContextManager[Dispatcher]]:
    """A ``Background`` for :func:`hookrelay.service.server.app.create_app`: the dispatcher on a
    loop and a pool of its own (the API's pool is not used), woken directly by
    the API's commits of new events."""

    @contextlib.asynccontextmanager
    async def run(pool: asyncpg.Pool, signals: Signals) -> AsyncIterator[Dispatcher]:
        thread = _DispatcherThread(runtime)
        thread.start()
        await asyncio.to_thread(thread.up.wait)
        dispatcher, loop = thread.dispatcher, thread.loop
        try:
            if dispatcher is None or loop is None:
                raise thread.error or RuntimeError("the dispatcher did not start")

            def wake(lane: tuple[str, str] | None) -> None:
                if not loop.is_closed():
                    loop.call_soon_threadsafe(dispatcher.wake, lane)

            dispatcher.woken_by = signals.origin
            signals.wake_locally(wake)
            yield dispatcher
        finally:
            if dispatcher is not None and loop is not None and thread.is_alive():
                # Stop is graceful: in-flight attempts finish, waiting rows go back.
                loop.call_soon_threadsafe(dispatcher.stop)
            await asyncio.to_thread(thread.join)
        if thread.error is not None:
            raise thread.error

    return run


def sweeper_background(
    runtime: Runtime,
) -> Callable[[asyncpg.Pool, Signals], contextlib.AbstractAsyncContextManager[None]]:
    """The timeout sweeper as a ``Background``."""

    def run(pool: asyncpg.Pool, _: Signals) -> contextlib.AbstractAsyncContextManager[None]:
        return sweeping(pool, runtime.settings.sweep_interval_s, runtime.settings.retention())

    return run
