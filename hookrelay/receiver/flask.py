"""Flask: a view decorator that verifies the webhook and passes the event to the view.

::

    @app.post("/webhooks")
    @webhook(secrets=[secret])
    def receive(event: WebhookEvent):
        ...                 # return nothing for 204, or any Flask answer

A webhook that fails the checks is answered 400 and never reaches the view.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from flask import request

from hookrelay.receiver.errors import VerificationError
from hookrelay.receiver.signatures import DEFAULT_TOLERANCE_S, Verifier

__all__ = ["webhook"]


def webhook(
    *,
    secrets: str | Sequence[str] = (),
    public_keys: str | Sequence[str] = (),
    tolerance: float = DEFAULT_TOLERANCE_S,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a view: it is called as ``view(event, **url_arguments)``."""
    verifier = Verifier(secrets, public_keys, tolerance)

    def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                event = verifier(dict(request.headers), request.get_data())
            except VerificationError as exc:
                return {"error": {"code": "invalid_webhook", "message": str(exc)}}, 400
            answer = view(event, *args, **kwargs)
            return ("", 204) if answer is None else answer

        return wrapper

    return decorate
