"""Starlette and FastAPI: a dependency that verifies, and an endpoint wrapper.

FastAPI::

    verified = VerifiedWebhook(secrets=[secret])

    @app.post("/webhooks", status_code=204)
    async def receive(event: WebhookEvent = Depends(verified)) -> None: ...

Starlette: ``Route("/webhooks", webhook_endpoint(handle, secrets=[secret]), methods=["POST"])``
where ``handle(event)`` (sync or async) returns a Response, or None for 204.
A webhook that fails the checks is answered 400 and never reaches your code.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from hookrelay.receiver.errors import VerificationError
from hookrelay.receiver.signatures import DEFAULT_TOLERANCE_S, Verifier, WebhookEvent

__all__ = ["VerifiedWebhook", "webhook_endpoint"]


class VerifiedWebhook:
    """``await verified(request)``: the verified event, else ``HTTPException(400)``."""

    def __init__(
        self,
        *,
        secrets: str | Sequence[str] = (),
        public_keys: str | Sequence[str] = (),
        tolerance: float = DEFAULT_TOLERANCE_S,
    ) -> None:
        self.verifier = Verifier(secrets, public_keys, tolerance)

    async def __call__(self, request: Request) -> WebhookEvent:
        body = await request.body()
        try:
            return self.verifier(request.headers, body)
        except VerificationError as exc:
            raise HTTPException(400, detail=str(exc)) from None


def webhook_endpoint(
    handler: Callable[[WebhookEvent], Any],
    *,
    secrets: str | Sequence[str] = (),
    public_keys: str | Sequence[str] = (),
    tolerance: float = DEFAULT_TOLERANCE_S,
) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint: 400 ``{"error": ...}`` if the webhook fails the checks,
    else ``handler(event)``'s Response (204 if it returns None)."""
    verifier = Verifier(secrets, public_keys, tolerance)

    async def endpoint(request: Request) -> Response:
        try:
            event = verifier(request.headers, await request.body())
        except VerificationError as exc:
            error = {"code": "invalid_webhook", "message": str(exc)}
            return JSONResponse({"error": error}, status_code=400)
        answer = handler(event)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer if isinstance(answer, Response) else Response(status_code=204)

    return endpoint
