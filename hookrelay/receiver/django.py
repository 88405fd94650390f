"""Django: a view decorator that verifies the webhook and passes the event to the view.

::

    @webhook(secrets=[settings.HOOKRELAY_SECRET])
    def receive(request, event):
        ...                 # return nothing for 204, or an HttpResponse

The view is exempt from CSRF (the signature is the check) and takes POST only. A
webhook that fails the checks is answered 400 and never reaches the view. Async
views (``async def``) are decorated the same way.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, cast

from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from hookrelay.receiver.errors import VerificationError
from hookrelay.receiver.signatures import DEFAULT_TOLERANCE_S, Verifier, WebhookEvent

__all__ = ["webhook"]


def webhook(
    *,
    secrets: str | Sequence[str] = (),
    public_keys: str | Sequence[str] = (),
    tolerance: float = DEFAULT_TOLERANCE_S,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a view: it is called as ``view(request, event, *args, **kwargs)``."""
    verifier = Verifier(secrets, public_keys, tolerance)

    def check(request: HttpRequest) -> WebhookEvent | HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        try:
            return verifier(request.headers, request.body)
        except VerificationError as exc:
            error = {"code": "invalid_webhook", "message": str(exc)}
            return JsonResponse({"error": error}, status=400)

    def answer(result: Any) -> Any:
        return HttpResponse(status=204) if result is None else result

    def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(view):

            @functools.wraps(view)
            async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                event = check(request)
                if isinstance(event, HttpResponse):
                    return event
                return answer(await view(request, event, *args, **kwargs))

            return cast(Callable[..., Any], csrf_exempt(async_wrapper))

        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            event = check(request)
            if isinstance(event, HttpResponse):
                return event
            return answer(view(request, event, *args, **kwargs))

        return cast(Callable[..., Any], csrf_exempt(wrapper))

    return decorate
