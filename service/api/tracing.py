"""A span for each API request, when tracing is on (``hookrelay.outbox.tracing``).

Added to the app only then: with tracing off no middleware runs and nothing imports
OpenTelemetry. The span is a child of the caller's W3C ``traceparent`` (a malformed one
is ignored), is current while the route runs (so a submit keeps it as the task's trace
when the submitter sent none, and an executor's state change is its child), and is
named by the route's template, not the path, so ids do not multiply span names.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hookrelay.outbox import tracing
from hookrelay.service.api.release import release

__all__ = ["TracingMiddleware", "configure"]


def configure() -> bool:
    """Tracing on for this process if the environment asks (``OTEL_EXPORTER_OTLP_*``)."""
    return tracing.configure_from_env(version=release())


class TracingMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        parent = tracing.parse(headers.getlist("traceparent"), headers.getlist("tracestate"))
        method = scope["method"]
        status: int | None = None

        async def answer(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with tracing.span(
            method,
            parent=parent,
            kind="server",
            attributes={"http.request.method": method, "url.path": scope["path"]},
        ) as otel:
            assert otel is not None  # added to the app only with tracing on
            try:
                await self.app(scope, receive, answer)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if route is not None:
                    otel.update_name(f"{method} {route}")
                    otel.set_attribute("http.route", route)
                if status is not None:
                    otel.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        tracing.failed(otel, f"HTTP {status}")
