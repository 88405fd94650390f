"""``/portal``: the partner portal, server-rendered HTML for the people who receive a
tenant's webhooks.

Opened only by a single-use portal link (``POST /v1/portal-links``, or an operator's
``POST /v1/admin/tenants/{id}/portal-links``); the session it opens sees and acts on
that tenant's tasks, deliveries, dead letters, notifications and signing keys alone
(another tenant's id in the URL is a 404). A read-only link's session has no forms,
and its POSTs are refused. Plain forms that work without JavaScript; one small script
keeps the task list live over the tenant's status stream.

:mod:`.session` (the session a link opens, checked at every request), :mod:`.pages`
(the handlers). Shares the console's guards (CSRF, origin, headers), its template
machinery (escaping, inert control characters, the chart) and its stylesheet. Builds
on :mod:`hookrelay.service.console`, :mod:`hookrelay.service.live` (the status stream),
:mod:`hookrelay.service.api` and the outbox; ``hookrelay.service.server.app`` mounts it.
Never imports the server or the CLI.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from hookrelay.outbox.portal import SESSION_MAX_S, open_link
from hookrelay.service.api.routes import portal_links
from hookrelay.service.console.security import FormRejected, check_csrf, read_form, session_mount
from hookrelay.service.console.views import as_page
from hookrelay.service.portal import pages
from hookrelay.service.portal.pages import show
from hookrelay.service.portal.session import (
    SESSION_COOKIE,
    Partner,
    SecureOverHttps,
    current,
    session_secret,
    start,
)

log = logging.getLogger("hookrelay.portal")
Handler = Callable[[Request, Partner], Awaitable[Response]]

ENDED = (
    "There is no open portal session here: it ended (after 12 hours, or when the API "
    "key was rotated), or this browser never opened one. Ask for a new portal link."
)


def _session(handler: Handler, *, writes: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """The session's partner only; a write needs a session that may write. Failures
    render as a page, never as JSON or a trace."""

    async def guarded(request: Request) -> Response:
        who = await current(request)
        if who is None:
            return show(request, None, "message.html", 401, heading="Signed out", text=ENDED)
        if writes and who.read_only:
            return show(
                request,
                who,
                "message.html",
                403,
                heading="Read-only",
                text="This portal session was opened with a read-only link: it cannot change "
                "anything.",
            )

        def message(status: int, text: str) -> Response:
            return show(request, who, "message.html", status, heading="Not done", text=text)

        return await as_page(request, handler(request, who), message)

    return guarded


async def entry(request: Request) -> Response:
    """``/portal`` itself: to the portal's home, by a path-only Location (as ``/ops``)."""
    return RedirectResponse("/portal/", status_code=308)


async def home(request: Request) -> Response:
    if await current(request) is None:
        return show(request, None, "message.html", 401, heading="Signed out", text=ENDED)
    return RedirectResponse("/portal/overview", status_code=303)


async def open_portal(request: Request) -> Response:
    """A portal link: opens a session once, then the link is spent."""
    token = request.query_params.get("token", "")
    async with request.app.state.pool.acquire() as conn:
        opened = await open_link(conn, token)
    if opened is None:
        log.info("portal link refused (unknown, used, expired or its key rotated)")
        return show(
            request,
            None,
            "message.html",
            410,
            heading="This link cannot be opened",
            text="A portal link opens once, within 15 minutes, and only while the API key "
            "it was made under is current. Ask for a new one.",
        )
    start(request, opened)
    log.info("portal opened for %s%s", opened.tenant_id, " (read-only)" if opened.read_only else "")
    return RedirectResponse("/portal/overview", status_code=303)


async def sign_out(request: Request) -> Response:
    try:
        check_csrf(request, await read_form(request))
    except FormRejected as exc:
        return show(request, None, "message.html", 400, heading="Not done", text=str(exc))
    request.session.clear()
    return show(
        request, None, "message.html", heading="Signed out", text="You have left the portal."
    )


def routes(admin_token: str) -> list[BaseRoute]:
    """Everything the app serves for the portal: the link routes of the API, ``/portal``
    and the pages under it."""
    return [*portal_links.routes, Route("/portal", entry, methods=["GET"]), mount(admin_token)]


def mount(admin_token: str) -> Mount:
    """The portal, mounted at ``/portal`` with its own session and security headers."""
    s = _session

    def w(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        return _session(handler, writes=True)

    post = ["POST"]
    routes = [
        Route("/", home),
        Route("/open", open_portal, methods=["GET"]),
        Route("/sign-out", sign_out, methods=post),
        Route("/overview", s(pages.overview)),
        Route("/tasks", s(pages.tasks)),
        Route("/tasks/{task_id}", s(pages.task)),
        Route("/tasks/{task_id}/redeliver", w(pages.redeliver), methods=post),
        Route("/events", s(pages.live)),
        Route("/dead-letters", s(pages.dead_letters), methods=["GET"]),
        Route("/dead-letters/preview", w(pages.preview_replay), methods=post),
        Route("/dead-letters/replay", w(pages.replay_range), methods=post),
        Route("/dead-letters/{event_id}", s(pages.dead_letter)),
        Route("/dead-letters/{event_id}/replay", w(pages.replay_one), methods=post),
        Route("/notifications", s(pages.notifications), methods=["GET"]),
        Route("/notifications", w(pages.set_notifications), methods=post),
        Route("/notifications/delete", w(pages.delete_notifications), methods=post),
        Route("/notifications/test", w(pages.test_notification), methods=post),
        Route("/signing-keys", s(pages.signing_keys), methods=["GET"]),
        Route("/signing-keys/rotate", w(pages.rotate), methods=post),
        Route("/test-events", w(pages.send_test), methods=post),
        Route("/test-events/{event_id}", s(pages.test_event)),
        Mount(
            "/static",
            # The portal's script, and the console's stylesheet beside it.
            app=StaticFiles(
                directory=Path(__file__).parent / "static",
                packages=[("hookrelay.service.console", "static")],
            ),
            name="portal_static",
        ),
    ]
    return session_mount(
        "/portal",
        routes,
        secret_key=session_secret(admin_token),
        cookie=SESSION_COOKIE,
        max_age=SESSION_MAX_S,
        inner=[Middleware(SecureOverHttps)],
    )
