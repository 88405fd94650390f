"""One delivery attempt: sign, POST under one total deadline, read a capped body, classify.

The rules (DESIGN.md): 2xx delivered; 410 dead at once; 429/503 honour
Retry-After within the policy's cap; redirects are not followed and count as
failures; any other status, a timeout or a connection error is retried until
the attempt budget is spent. A destination the SSRF guard refuses is dead.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hookrelay.outbox import tracing
from hookrelay.outbox.dispatch.retry import RetryPolicy, parse_retry_after
from hookrelay.outbox.egress.http import Sender
from hookrelay.outbox.egress.ssrf import AddressPolicy
from hookrelay.outbox.egress.untrusted import receiver_text
from hookrelay.outbox.errors import BlockedDestination, InvalidCallbackUrl, TransportError
from hookrelay.outbox.keys.signing import Signer
from hookrelay.outbox.models import Outcome
from hookrelay.outbox.store.delivery import ClaimedEvent

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["AttemptLimits", "AttemptResult", "ClaimedEvent", "attempt"]

PREFIX_CHARS = 256
# An error quotes what the receiver sent (a Location, aiohttp's account of a
# broken answer): bounded, escaped, like the body's prefix.
ERROR_CHARS = 1000
# Of a redirect's Location, at most this much is quoted: fully escaped (six
# characters each at worst), the message still fits in ERROR_CHARS.
LOCATION_CHARS = 160


@dataclass(frozen=True, slots=True)
class AttemptResult:
    event: ClaimedEvent
    outcome: Outcome
    attempted_at: datetime
    duration_ms: float
    status_code: int | None = None
    error: str | None = None
    response_prefix: str | None = None
    next_at: datetime | None = None


# No slots: the class attributes are the defaults, which the settings read.
@dataclass(frozen=True)
class AttemptLimits:
    total_timeout_s: float = 15.0
    max_response_bytes: int = 65_536


@functools.lru_cache(maxsize=4096)
def _check_url(addresses: AddressPolicy, url: str) -> None:
    # Pure in (policy, url), and profiling showed it near 4% of a busy
    # dispatcher: check each callback URL once. Refusals raise, and are not cached.
    addresses.check_url(url)


def _current_task() -> asyncio.Task[Any]:
    task = asyncio.current_task()
    assert task is not None, "attempt() runs inside a task"
    return task


def _judge(status: int, headers: Mapping[str, str]) -> tuple[Outcome, str | None, float | None]:
    """Outcome, error text and server-requested delay for one HTTP status."""
    if 200 <= status < 300:
        return "delivered", None, None
    if status == 410:
        return "dead", "receiver answered 410 Gone", None
    if 300 <= status < 400:
        where = headers.get("location", "?")
        return "retry", f"redirect {status} to {where[:LOCATION_CHARS]} not followed", None
    if status in (429, 503):
        return "retry", f"HTTP {status}", parse_retry_after(headers.get("retry-after"))
    return "retry", f"HTTP {status}", None


class Deadline:
    """One attempt's total deadline, on the loop's timer: what ``asyncio.timeout``
    does, without its per-use context manager (a dispatcher makes thousands of
    attempts a second). ``expired`` tells the cancellation it caused from others."""

    __slots__ = ("_cancelling", "_handle", "expired", "_task")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], s: float):
        self.expired = False
        self._task = task
        self._cancelling = task.cancelling()  # cancellations already asked of the task
        self._handle = loop.call_at(loop.time() + s, self._expire)

    def _expire(self) -> None:
        self.expired = True
        self._task.cancel()

    def cancel(self) -> None:
        self._handle.cancel()

    def caused(self) -> bool:
        """Whether a CancelledError is this deadline's alone; if so, the task is no
        longer being cancelled (as ``asyncio.timeout`` leaves it)."""
        return self.expired and self._task.uncancel() <= self._cancelling


async def attempt(
    sender: Sender,
    event: ClaimedEvent,
    signer: Signer,
    policy: RetryPolicy,
    addresses: AddressPolicy,
    limits: AttemptLimits,
    *,
    loop: asyncio.AbstractEventLoop | None = None,
    task: asyncio.Task[Any] | None = None,
) -> AttemptResult:
    """Make one attempt and decide what happens to the event next.

    ``loop`` and ``task`` (the current ones) spare a caller that makes many
    attempts looking them up for each.
    """
    attempted_at = datetime.now(UTC)
    started = time.perf_counter()
    status: int | None = None
    prefix: str | None = None
    retry_after: float | None = None
    deadline: Deadline | None = None
    otel: Span | None = None
    try:
        # The URL was checked at submit; checking again here catches IP-literal
        # hosts, which never reach the guarded resolver.
        _check_url(addresses, event.callback_url)
        headers = signer.headers(event.event_id, int(time.time()), event.body)
        trace = event.trace or tracing.derived(event.event_id)
        if tracing.enabled():
            otel = _attempt_span(event, trace)
        traceparent, tracestate = trace
        assert traceparent is not None  # task_traces.traceparent is NOT NULL
        headers["traceparent"] = tracing.attempt_traceparent(traceparent, otel)
        if tracestate:
            headers["tracestate"] = tracestate
        if event.callback_headers:  # the task's own; none may shadow the signed ones
            headers = {**event.callback_headers, **headers}
        deadline = Deadline(
            loop or asyncio.get_running_loop(),
            task or _current_task(),
            limits.total_timeout_s,
        )
        try:
            reply = await sender.post(
                event.callback_url, event.body, headers, limits.max_response_bytes
            )
        finally:
            deadline.cancel()
        status = reply.status
        # Four bytes a character at most: enough bytes for PREFIX_CHARS characters.
        prefix = receiver_text(reply.body[: PREFIX_CHARS * 4], PREFIX_CHARS) or None
        outcome, error, retry_after = _judge(status, reply.headers)
    except asyncio.CancelledError:
        if deadline is None or not deadline.caused():
            if otel is not None:
                otel.end()
            raise  # someone else's (a shutdown): theirs to handle
        # Ours alone: the attempt ran out of time; the task goes on.
        outcome, error = "retry", f"timed out after {limits.total_timeout_s:g}s"
    except TimeoutError:  # a sender's own deadline
        outcome, error = "retry", f"timed out after {limits.total_timeout_s:g}s"
    except BlockedDestination as exc:
        outcome, error = "dead", f"destination refused: {exc.reason}"
    except InvalidCallbackUrl as exc:
        outcome, error = "dead", f"invalid callback URL: {exc}"
    except TransportError as exc:
        outcome, error = "retry", str(exc)
    duration_ms = (time.perf_counter() - started) * 1000
    # The one point where receiver text leaves an attempt for the database and
    # the logs: an outcome that cannot be stored would be re-sent forever, unspent.
    error = receiver_text(error, ERROR_CHARS) if error else error
    next_at = None
    if outcome == "retry":
        if policy.exhausted(event.budget_used + 1):
            outcome = "dead"
            error = f"{error} (gave up after {event.budget_used + 1} attempts)"
        else:
            delay = policy.next_delay(event.budget_used + 1, retry_after=retry_after)
            next_at = attempted_at + timedelta(seconds=delay)
    if otel is not None:
        _end_span(otel, outcome, duration_ms, status, error)
    return AttemptResult(event, outcome, attempted_at, duration_ms, status, error, prefix, next_at)


def _attempt_span(event: ClaimedEvent, trace: Sequence[str | None]) -> Span | None:
    """The attempt's span, a child of the task's trace context (tracing is on)."""
    url = urlsplit(event.callback_url)
    return tracing.start(
        "hookrelay.attempt",
        parent=tracing.parse(trace[0], trace[1]),
        kind="client",
        attributes={
            "http.request.method": "POST",
            "server.address": url.hostname or "",
            "server.port": url.port or (443 if url.scheme == "https" else 80),
            # the destination as the circuit breaker and GET /v1/admin/destinations name it
            "hookrelay.destination": event.host,
            "hookrelay.attempt.number": event.attempts + 1,
            "hookrelay.event.id": event.event_id,
            "hookrelay.event.type": event.event_type,
            "hookrelay.task.id": event.task_id or "",
            "hookrelay.tenant.id": event.tenant_id,
        },
    )


def _end_span(
    otel: Span,
    outcome: Outcome,
    duration_ms: float,
    status: int | None,
    error: str | None,
) -> None:
    otel.set_attribute("hookrelay.attempt.duration_ms", duration_ms)
    otel.set_attribute("hookrelay.attempt.outcome", outcome)
    if status is not None:
        otel.set_attribute("http.response.status_code", status)
    if outcome != "delivered":
        tracing.failed(otel, error)
    otel.end()
