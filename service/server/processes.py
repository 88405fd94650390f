"""The long-running commands: ``serve``, ``api`` and ``dispatch``.

Each binds what it must first (the port), then opens the database, then runs
until SIGTERM or SIGINT, and always lets go of the embedded server last.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.applications import Starlette

from hookrelay.outbox.tasks import sweeping
from hookrelay.service.api.routes.metrics import ResponseCounter
from hookrelay.service.server import dispatch_http, lifecycle, supervisor
from hookrelay.service.server import event_loop as serving
from hookrelay.service.server.app import create_app
from hookrelay.service.server.background import (
    dispatcher_background,
    make_dispatcher,
    sweeper_background,
)
from hookrelay.service.server.lifecycle import Stopped, Stopping
from hookrelay.service.server.open_database import open_database
from hookrelay.service.server.prerequisites import Runtime, existing_admin_token, prepare
from hookrelay.service.server.settings import Settings
from hookrelay.service.server.tty_text import printable

log = logging.getLogger("hookrelay")


def without_password(dsn: str) -> str:
    """``dsn`` with no password in it (in its user part or its query), to be printed."""
    parts = urlsplit(dsn)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    netloc = f"{userinfo.partition(':')[0]}{at}{hosts}"
    query = "&".join(
        p for p in parts.query.split("&") if p and not p.lower().startswith("password=")
    )
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


def _where(runtime: Runtime) -> list[str]:
    s = runtime.settings
    database = f"embedded PostgreSQL in {s.data_dir / 'pg'}" if runtime.embedded else "DATABASE_URL"
    unused = "" if s.data_dir.is_dir() else " (not created: nothing is kept there)"
    lines = [f"database:        {database}"]
    if runtime.embedded:
        # For executors' own connections (hookrelay.outbox.complete_task). The embedded
        # server takes local connections only (a Unix socket, trust auth): it has no
        # password to show, and any that a DSN carried would not be printed.
        lines.append(f"database url:    {without_password(runtime.dsn)}")
    return [*lines, f"data directory:  {s.data_dir}{unused}"]


def _deliveries(settings: Settings) -> list[str]:
    """The banner's lines on how deliveries leave, when not directly with system CAs."""
    lines = []
    if settings.egress_proxy is not None:
        lines.append(f"egress proxy:    {settings.egress_proxy} (HOOKRELAY_EGRESS_PROXY)")
    if settings.client_cert is not None:
        lines.append(f"client cert:     {settings.client_cert} (HOOKRELAY_CLIENT_CERT)")
    if settings.ca_bundle is not None:
        lines.append(f"extra CAs:       {settings.ca_bundle} (HOOKRELAY_CA_BUNDLE)")
    return lines


def _banner(runtime: Runtime, url: str, processes: str, *, delivering: bool = False) -> None:
    lines = [f"hookrelay listening on {url}", *_where(runtime)]
    if delivering:
        lines += _deliveries(runtime.settings)
    lines.append(f"processes:       {processes}")
    lines.append(f"admin token:     {runtime.admin_token_source()}")
    if runtime.admin_token_created:
        lines.append(
            "\nFirst run: an admin token was generated and saved to "
            f"{runtime.admin_token_source()}\n\n  HOOKRELAY_ADMIN_TOKEN={runtime.admin_token}\n\n"
            "Create a tenant with:\n"
            f"  curl -s -X POST {url}/v1/admin/tenants \\\n"
            f"       -H 'Authorization: Bearer {runtime.admin_token}' \\\n"
            "       -H 'content-type: application/json' -d '{\"name\": \"acme\"}'\n"
            "or: hookrelay tenants create acme\n"
        )
    print(printable("\n".join(lines), keep_newlines=True), flush=True)


def _end_long_responses(app: Starlette) -> None:
    # uvicorn waits for open responses before it shuts the app down: streams end
    # and long-polls answer now, rather than outlast the graceful timeout.
    app.state.hub.end_all()
    app.state.watcher.release_all()


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def run_api(
    runtime: Runtime,
    app: Starlette,
    sock: socket.socket,
    stopping: Stopping,
    *,
    with_dispatcher: bool,
    on_listening: Callable[[], None],
) -> bool:
    """Serve ``app`` on ``sock`` until ``stopping``; False if it never started listening.

    The whole API of ``serve`` and ``api`` with one worker, and each API worker of several.
    """
    settings = runtime.settings
    # Descriptors kept for the dispatcher's deliveries and the database pools.
    reserve = (settings.concurrency if with_dispatcher else 0) + 2 * settings.db_pool_size
    limits = serving.ConnectionLimits(
        header_timeout_s=settings.header_timeout_s,
        body_timeout_s=settings.body_timeout_s,
        keep_alive_s=settings.keep_alive_s,
        max_connections=serving.descriptor_cap(settings.max_connections, reserve + 64),
        ws_ping_s=settings.ws_ping_s,
    )
    config = serving.uvicorn_config(
        # Counted outside Starlette's own error handling, so its 500s are counted too.
        ResponseCounter(app),
        host=settings.host,
        port=settings.port,
        graceful_s=int(settings.http_timeout_s) + 5,
        limits=limits,
    )
    server = lifecycle.Server(
        config, on_listening=on_listening, on_shutdown=lambda: _end_long_responses(app)
    )
    stopping.on_stop(server.stop, force=server.force)
    await server.serve(sockets=[sock])
    return server.started


async def serve(settings: Settings, *, with_dispatcher: bool) -> None:
    """``serve`` (API, dispatcher and sweeper) or ``api`` (the API alone).

    With more than one worker (``--workers``, ``HOOKRELAY_WORKERS``) this process
    supervises the workers instead of serving (service/server/supervisor.py).
    """
    stopping = Stopping()
    runtime: Runtime | None = None
    workers = supervisor.workers_for(settings, with_dispatcher=with_dispatcher)
    with stopping.handling_signals():
        sock = lifecycle.bind(settings.host, settings.port)
        try:
            async with stopping.interruptible():
                # Only `serve` may create a data directory (and an embedded database).
                runtime = prepare(settings, may_create=with_dispatcher)
                await open_database(runtime)
            ready, url = runtime, _url(settings.host, settings.port)
            described = supervisor.describe(workers, with_dispatcher=with_dispatcher)
            if workers == 1:
                background = (
                    [dispatcher_background(runtime), sweeper_background(runtime)]
                    if with_dispatcher
                    else []
                )
                await run_api(
                    runtime,
                    create_app(runtime, background=background),
                    sock,
                    stopping,
                    with_dispatcher=with_dispatcher,
                    on_listening=lambda: _banner(ready, url, described, delivering=with_dispatcher),
                )
            else:
                await supervisor.Supervisor(
                    runtime, sock, stopping, workers=workers, with_dispatcher=with_dispatcher
                ).run(on_ready=lambda: _banner(ready, url, described, delivering=with_dispatcher))
        except Stopped:
            log.info("stopped while starting")
        finally:
            sock.close()
            if runtime is not None:
                runtime.close()
    log.info("hookrelay stopped")


def _endpoints(settings: Settings, admin_token: str) -> list[str]:
    """The banner's lines on ``dispatch``'s own port."""
    if settings.metrics_port is None:
        return ["metrics:         off (HOOKRELAY_METRICS_PORT)"]
    url = _url(settings.host, settings.metrics_port)
    lines = [f"metrics:         {url}/metrics (and /healthz, /readyz)"]
    if not admin_token and not settings.metrics_token:
        lines.append(
            "                 no HOOKRELAY_ADMIN_TOKEN or HOOKRELAY_METRICS_TOKEN: "
            "/metrics refuses every request"
        )
    return lines


async def dispatch(settings: Settings) -> None:
    """``dispatch``: claim and deliver until stopped; in-flight attempts finish first.

    Meanwhile its own port (``HOOKRELAY_METRICS_PORT``, unless off) serves
    /metrics, /healthz and /readyz; it is bound first, like the API's.
    """
    stopping = Stopping()
    runtime: Runtime | None = None
    with stopping.handling_signals():
        sock = None if settings.metrics_port is None else dispatch_http.bind(settings)
        try:
            async with stopping.interruptible():
                runtime = prepare(settings, may_create=False, needs_token=False)
                await open_database(runtime)
            s = runtime.settings
            pool = await runtime.open_pool()
            try:
                dispatcher = make_dispatcher(runtime, pool)
                stopping.on_stop(dispatcher.stop)
                # Only checked here, never generated: the API's, from the environment
                # or the data directory `serve` keeps it in.
                token = existing_admin_token(s)
                lines = [
                    f"hookrelay dispatcher {dispatcher.config.owner} started",
                    *_where(runtime),
                    *_deliveries(s),
                    *_endpoints(s, token),
                ]

                def announce() -> None:
                    print(printable("\n".join(lines), keep_newlines=True), flush=True)
                    log.info("dispatcher %s started", dispatcher.config.owner)
                    if sock is not None and not token and not s.metrics_token:
                        log.warning(
                            "no HOOKRELAY_ADMIN_TOKEN or HOOKRELAY_METRICS_TOKEN:"
                            " /metrics on HOOKRELAY_METRICS_PORT refuses every request"
                        )

                async with sweeping(pool, s.sweep_interval_s, s.retention()):
                    if sock is None:
                        announce()
                        await dispatcher.run()
                    else:
                        await dispatch_http.run_beside(
                            dispatcher,
                            pool=pool,
                            sock=sock,
                            settings=s,
                            admin_token=token,
                            stopping=stopping,
                            announce=announce,
                        )
            finally:
                await pool.close()
        except Stopped:
            log.info("stopped while starting")
        finally:
            if sock is not None:
                sock.close()
            if runtime is not None:
                runtime.close()
