"""The console's guards: a signed session cookie, CSRF on every form, slow failed
sign-ins, and headers that keep the pages to their own origin.

The session cookie is Starlette's signed ``SessionMiddleware`` cookie (HttpOnly,
SameSite=Strict). Its signing key is derived from the admin token, so every
process sharing the token accepts it, and changing the token signs everyone out.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections.abc import Sequence
from urllib.parse import parse_qsl

from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.routing import BaseRoute, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SESSION_COOKIE = "hookrelay_ops"
SESSION_MAX_AGE_S = 8 * 3600
MAX_FORM_BYTES = 64 * 1024

# No inline script or style anywhere: everything comes from /ops/static.
HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    # same-origin, not no-referrer: browsers then send a real Origin on our POSTs.
    "referrer-policy": "same-origin",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}


def session_secret(admin_token: str) -> str:
    return hashlib.sha256(b"hookrelay-ops-session\0" + admin_token.encode()).hexdigest()


def _token_tag(admin_token: str) -> str:
    return hashlib.sha256(b"hookrelay-ops-tag\0" + admin_token.encode()).hexdigest()[:16]


class SecurityHeaders:
    """Adds :data:`HEADERS` to every answer under the console."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, with_headers if scope["type"] == "http" else send)


def session_mount(
    path: str,
    routes: list[BaseRoute],
    *,
    secret_key: str,
    cookie: str,
    max_age: int,
    inner: Sequence[Middleware] = (),
) -> Mount:
    """``routes`` at ``path`` under :data:`HEADERS` and a signed HttpOnly SameSite=Strict
    session cookie of their own, on ``path`` only (the console's, and the portal's)."""
    return Mount(
        path,
        routes=routes,
        middleware=[
            Middleware(SecurityHeaders),
            *inner,
            Middleware(
                SessionMiddleware,
                secret_key=secret_key,
                session_cookie=cookie,
                max_age=max_age,
                same_site="strict",
                path=path,
            ),
        ],
    )


def signed_in(request: Request) -> bool:
    s = request.session
    started = s.get("at")
    return (
        isinstance(started, int | float)
        and time.time() - started < SESSION_MAX_AGE_S
        and hmac.compare_digest(str(s.get("tag", "")), _token_tag(request.app.state.admin_token))
    )


def sign_in(request: Request) -> None:
    request.session.clear()
    request.session.update(
        at=time.time(),
        tag=_token_tag(request.app.state.admin_token),
        csrf=secrets.token_urlsafe(24),
    )


def csrf_token(request: Request) -> str:
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(24)
        request.session["csrf"] = token
    return token


async def read_form(request: Request) -> dict[str, list[str]]:
    """A small urlencoded form (no multipart: the console has no uploads)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormRejected("form too large")
    form: dict[str, list[str]] = {}
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError as exc:
        raise FormRejected("form is not UTF-8") from exc
    for key, value in pairs:
        if "\x00" in key or "\x00" in value:
            raise FormRejected("form holds a NUL character")
        form.setdefault(key, []).append(value)
    return form


class FormRejected(Exception):
    """A POST the console refuses: bad CSRF token, foreign origin, malformed form."""


def check_origin(request: Request) -> None:
    """A POST must come from a page of this origin (Origin, else Referer)."""
    own = f"{request.url.scheme}://{request.url.netloc}"
    origin = request.headers.get("origin")
    if origin is not None:
        if origin != own:
            raise FormRejected("cross-origin form post refused")
        return
    referer = request.headers.get("referer", "")
    if not (referer == own or referer.startswith(own + "/")):
        raise FormRejected("form post without an Origin from this console refused")


def check_csrf(request: Request, form: dict[str, list[str]]) -> None:
    check_origin(request)
    sent = (form.get("csrf") or [""])[0]
    expected = request.session.get("csrf")
    if not isinstance(expected, str) or not hmac.compare_digest(sent, expected):
        raise FormRejected("the form has expired; reload the page and try again")


class SignInThrottle:
    """Each failed sign-in from an address waits longer: 0.5 s, 1 s, 2 s ... up to 8 s.

    Guessing the token online is hopeless anyway (it is long and random); this
    keeps a script from trying fast and makes brute force visible in the logs.
    """

    def __init__(self, *, base_s: float = 0.5, cap_s: float = 8.0, forget_s: float = 900) -> None:
        self.base_s, self.cap_s, self.forget_s = base_s, cap_s, forget_s
        self._failures: dict[str, tuple[int, float]] = {}

    def delay_s(self, address: str) -> float:
        count, last = self._failures.get(address, (0, 0.0))
        if count == 0 or time.monotonic() - last > self.forget_s:
            return 0.0
        return float(min(self.cap_s, self.base_s * 2 ** (count - 1)))

    async def failed(self, address: str) -> None:
        count, last = self._failures.get(address, (0, 0.0))
        if time.monotonic() - last > self.forget_s:
            count = 0
        self._failures[address] = (count + 1, time.monotonic())
        if len(self._failures) > 10_000:  # bounded: forget the oldest
            oldest = min(self._failures, key=lambda a: self._failures[a][1])
            del self._failures[oldest]
        await asyncio.sleep(self.delay_s(address))

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)
