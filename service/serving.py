"""How hookrelay runs: its event loop and its uvicorn settings.

Shared with ``bench/trivial_app.py``, so the API benchmark's baseline is served
exactly the way the API is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvicorn

T = TypeVar("T")


def uvicorn_config(app: Any, *, host: str, port: int, graceful_s: int = 5) -> uvicorn.Config:
    """One worker, no access log (our JSON logs say more), no proxy-header rewriting."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        # Nothing here reads the client address, so X-Forwarded-* need not be parsed.
        proxy_headers=False,
        timeout_graceful_shutdown=graceful_s,
    )


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop where it is installed, as ``uvicorn.run`` itself would.

    Measured with python -m bench api: GET /v1/tasks/{id} gains about 7 %.
    """
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
