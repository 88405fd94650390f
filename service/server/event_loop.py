"""How hookrelay runs: its event loop and its uvicorn settings.

Shared with ``bench/trivial_app.py``, so the API benchmark's baseline is served
exactly the way the API is.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import resource
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import uvicorn

from hookrelay.service.api.request_guard import MAX_HEADER_BYTES
from hookrelay.service.server.http_protocol import protocol_class

T = TypeVar("T")
log = logging.getLogger("hookrelay")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Read deadlines and caps of the HTTP server (``service/server/http_protocol.py``)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 75.0
    max_connections: int = 1000
    max_header_bytes: int = MAX_HEADER_BYTES
    # WebSocket protocol pings: a client that has not answered one within another
    # interval is dropped (uvicorn closes with 1011).
    ws_ping_s: float = 30.0


# Client messages on /v1/ws are small JSON (a subscribe names at most
# HOOKRELAY_WS_MAX_SUBSCRIPTIONS ids); uvicorn's default would buffer 16 MiB each.
WS_MAX_BYTES = 65_536


# Descriptors kept back from the connection cap: the dispatcher's outgoing
# connections and the database pool come out of the same limit.
def descriptor_cap(wanted: int, reserve: int) -> int:
    """``wanted``, lowered to fit under RLIMIT_NOFILE (raised to its hard limit first)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > soft):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # pragma: no cover - refused by the platform
            pass
    if soft == resource.RLIM_INFINITY or soft - reserve >= wanted:
        return wanted
    cap = max(16, soft - reserve)
    log.warning(
        "open-file limit %d leaves room for %d connections, not HOOKRELAY_MAX_CONNECTIONS=%d;"
        " raise LimitNOFILE",
        soft,
        cap,
        wanted,
    )
    return cap


def uvicorn_config(
    app: Any,
    *,
    host: str,
    port: int,
    graceful_s: int = 5,
    limits: ConnectionLimits | None = None,
) -> uvicorn.Config:
    """One worker, no access log (our JSON logs say more), no proxy-header rewriting,
    and the read deadlines and caps of ``limits``."""
    limits = limits or ConnectionLimits()
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_class(
            header_timeout_s=limits.header_timeout_s,
            body_timeout_s=limits.body_timeout_s,
            max_header_bytes=limits.max_header_bytes,
            max_connections=limits.max_connections,
        ),
        log_config=None,
        access_log=False,
        lifespan="on",
        # Nothing here reads the client address, so X-Forwarded-* need not be parsed.
        proxy_headers=False,
        timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]
        timeout_graceful_shutdown=graceful_s,
        ws_max_size=WS_MAX_BYTES,
        # permessage-deflate keeps a zlib compressor and decompressor per socket for
        # its whole life: measured (python -m bench streams, clients offering it as
        # browsers do) 77 MB per 1,000 idle sockets with it, 35 MB without. Task
        # messages are small JSON; the memory is worth more than the bytes.
        ws_per_message_deflate=False,
        ws_ping_interval=limits.ws_ping_s,
        ws_ping_timeout=limits.ws_ping_s,
    )


_gc_tuned = False


def tune_gc() -> None:
    """Collect less often, and never walk what was loaded at start-up.

    A dispatcher allocates thousands of short-lived objects per second (requests,
    futures, rows); at CPython's default the young generation is collected every
    700 allocations, and each full collection walks every module and class loaded.
    Frozen start-up objects and a young generation of 10,000: one dispatcher
    draining one host spent 100 µs of CPU per delivery against 107 µs before
    (alternating drains, python -m bench sched); disabling the collector
    altogether gained nothing more. Reference cycles are still collected.
    """
    global _gc_tuned
    if _gc_tuned:  # serve's dispatcher thread runs its loop through run() too
        return
    _gc_tuned = True
    gc.freeze()
    gc.set_threshold(10_000, 50, 100)


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop where it is installed, as ``uvicorn.run`` itself would.

    Measured with python -m bench api: GET /v1/tasks/{id} gains about 7 %.
    """
    tune_gc()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
