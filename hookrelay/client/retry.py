"""Which failed requests are sent again, and when: tenacity, configured once for both clients.

A request is sent again when its answer was lost or the server asked for a retry:

- a connection error or timeout, if the call may repeat (``retry="safe"``), or, for
  any call, when the request certainly never left (the connection was refused);
- 429 with ``Retry-After``, after that delay;
- 5xx (only 503, the database away, for calls that must not repeat);
- 409 ``idempotency_in_flight``: a submit with the same key is still being processed.

The pause is :func:`hookrelay.client.backoff.delay`; after ``attempts`` sends the
last error is raised.
"""

from __future__ import annotations

from typing import Any

from tenacity import RetryCallState, retry_if_exception, stop_after_attempt

from hookrelay.client import backoff
from hookrelay.client.errors import ApiError, Conflict, RateLimited, ServerError, TransportError
from hookrelay.client.ops import Retry

DEFAULT_ATTEMPTS = 5


def should_retry(exc: BaseException, kind: Retry) -> bool:
    """Whether the request that failed with ``exc`` is sent again."""
    if kind == "none":
        return False
    if isinstance(exc, TransportError):
        return kind == "safe" or not exc.sent
    if isinstance(exc, RateLimited):
        return exc.retry_after is not None
    if isinstance(exc, Conflict):
        return exc.code == "idempotency_in_flight"
    if isinstance(exc, ServerError):
        return kind == "safe" or exc.status == 503
    return False


def pause(state: RetryCallState) -> float:
    """tenacity ``wait``: the backoff for this attempt, at least the ``Retry-After``."""
    exc = state.outcome.exception() if state.outcome is not None else None
    after = exc.retry_after if isinstance(exc, ApiError) else None
    return backoff.delay(state.attempt_number, after)


def options(kind: Retry, attempts: int) -> dict[str, Any]:
    """Keyword arguments of ``tenacity.Retrying`` / ``AsyncRetrying`` (``sleep`` aside)."""
    return {
        "retry": retry_if_exception(lambda exc: should_retry(exc, kind)),
        "wait": pause,
        "stop": stop_after_attempt(attempts if kind != "none" else 1),
        "reraise": True,
    }
