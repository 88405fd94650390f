"""Request-header cap: uvicorn's httptools parser accepts headers of any size.

A 200 kB header was measured to reach the app unrefused; every byte of it is
held in memory per request. This ASGI middleware answers 431 with the usual
error shape once the headers add up to more than the cap.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_response

MAX_HEADER_BYTES = 16_384  # h11's own default limit, and what nginx allows in 2 x 8 kB


class HeaderLimit:
    def __init__(self, app: ASGIApp, max_bytes: int = MAX_HEADER_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            size = sum(len(name) + len(value) + 4 for name, value in scope["headers"])
            if size > self.max_bytes:
                response = error_response(
                    431,
                    "headers_too_large",
                    f"request headers are {size} bytes; the limit is {self.max_bytes}",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
