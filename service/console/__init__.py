"""``/ops``: the operations console, server-rendered HTML for people on call.

Plain forms that work without JavaScript; one small script refreshes the
overview. Every asset is served from here (no CDN, no outside font), under a
strict Content-Security-Policy. Only the admin token signs in.

:mod:`.pages` (the handlers), :mod:`.views` (rendering), :mod:`.security` (session,
CSRF, sign-in throttle). Builds on :mod:`hookrelay.service.api` (its errors and
validation) and the outbox; ``hookrelay.service.server.app`` mounts it. Never imports
the live streams, the server or the CLI.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from hookrelay.service.console import pages
from hookrelay.service.console.security import (
    SESSION_COOKIE,
    SESSION_MAX_AGE_S,
    FormRejected,
    SignInThrottle,
    check_csrf,
    read_form,
    session_mount,
    session_secret,
    sign_in,
    signed_in,
)
from hookrelay.service.console.views import as_page, page

log = logging.getLogger("hookrelay.ops")
Handler = Callable[[Request], Awaitable[Response]]


def _guarded(handler: Handler) -> Handler:
    """Signed-in only; failures render as a page, never as JSON or a trace."""

    async def guarded(request: Request) -> Response:
        if not signed_in(request):
            return RedirectResponse("/ops/sign-in", status_code=303)

        def message(status: int, text: str) -> Response:
            return page(request, "message.html", status, heading="Not done", text=text)

        return await as_page(request, handler(request), message)

    return guarded


async def entry(request: Request) -> Response:
    """``/ops`` itself: slash redirects are off app-wide (they echoed the Host header),
    so the console's bare path redirects to its home with a path-only Location."""
    return RedirectResponse("/ops/", status_code=308)


async def home(request: Request) -> Response:
    return RedirectResponse("/ops/overview" if signed_in(request) else "/ops/sign-in", 303)


async def sign_in_page(request: Request) -> Response:
    return page(request, "sign_in.html")


async def sign_in_submit(request: Request) -> Response:
    throttle: SignInThrottle = request.app.state.ops_throttle
    address = request.client.host if request.client else "?"
    try:
        form = await read_form(request)
        check_csrf(request, form)
    except FormRejected as exc:
        return page(request, "sign_in.html", 400, problem=str(exc))
    token = (form.get("token") or [""])[0]
    if not hmac.compare_digest(token.encode(), request.app.state.admin_token.encode()):
        log.warning("ops sign-in failed from %s", address)
        await throttle.failed(address)
        return page(request, "sign_in.html", 401, problem="That is not the admin token.")
    throttle.succeeded(address)
    sign_in(request)
    log.info("ops sign-in from %s", address)
    return RedirectResponse("/ops/overview", status_code=303)


async def sign_out(request: Request) -> Response:
    try:
        check_csrf(request, await read_form(request))
    except FormRejected as exc:
        return page(request, "message.html", 400, heading="Not done", text=str(exc))
    request.session.clear()
    return RedirectResponse("/ops/sign-in", status_code=303)


def mount(admin_token: str) -> Mount:
    """The console, mounted at ``/ops`` with its own session and security headers."""
    g = _guarded
    routes = [
        Route("/", home),
        Route("/sign-in", sign_in_page, methods=["GET"]),
        Route("/sign-in", sign_in_submit, methods=["POST"]),
        Route("/sign-out", sign_out, methods=["POST"]),
        Route("/overview", g(pages.overview)),
        Route("/dead-letters", g(pages.dead_letters), methods=["GET"]),
        Route("/dead-letters/preview", g(pages.preview_replay), methods=["POST"]),
        Route("/dead-letters/bulk-replay", g(pages.bulk_replay), methods=["POST"]),
        Route("/dead-letters/replay", g(pages.replay_selected), methods=["POST"]),
        Route("/events/{event_id}", g(pages.event)),
        Route("/events/{event_id}/replay", g(pages.replay_event), methods=["POST"]),
        Route("/tasks/{task_id}", g(pages.task)),
        Route("/tasks/{task_id}/redeliver", g(pages.redeliver_task), methods=["POST"]),
        Route("/destinations", g(pages.destinations)),
        Route("/destinations/close", g(pages.close_circuit), methods=["POST"]),
        Route("/tenants", g(pages.tenants), methods=["GET"]),
        Route("/tenants", g(pages.new_tenant), methods=["POST"]),
        Route(
            "/tenants/{tenant_id}/rotate-secret", g(pages.tenant_rotate_secret), methods=["POST"]
        ),
        Route("/tenants/{tenant_id}/rotate-key", g(pages.tenant_rotate_key), methods=["POST"]),
        Route("/tenants/{tenant_id}/notifications", g(pages.tenant_notifications)),
        Route("/audit", g(pages.audit)),
        Route("/search", g(pages.search)),
        Mount(
            "/static",
            app=StaticFiles(directory=Path(__file__).parent / "static"),
            name="ops_static",
        ),
    ]
    return session_mount(
        "/ops",
        routes,
        secret_key=session_secret(admin_token),
        cookie=SESSION_COOKIE,
        max_age=SESSION_MAX_AGE_S,
    )
