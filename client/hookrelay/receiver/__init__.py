"""Receiving hookrelay webhooks: verify the signature, then deduplicate by ``webhook-id``.

::

    from hookrelay.receiver import verify

    event = verify(headers, raw_body, secrets=["whsec_..."])   # or public_keys=["whpk_..."]
    if seen.add(event.id):                                       # a dedupe store
        ...

Adapters, each imported only when you import it (so only its framework is needed):
:mod:`hookrelay.receiver.starlette` (Starlette, FastAPI), :mod:`hookrelay.receiver.flask`,
:mod:`hookrelay.receiver.django`. Deduplication in PostgreSQL:
:mod:`hookrelay.receiver.postgres`. The attempt's W3C ``traceparent``, to continue the
submitter's trace: ``event.trace``, or :func:`trace_context` of the headers.
"""

from hookrelay.receiver.dedupe import AsyncSeen, MemorySeen, Seen
from hookrelay.receiver.errors import (
    BadSignature,
    InvalidPayload,
    MissingHeader,
    StaleTimestamp,
    VerificationError,
)
from hookrelay.receiver.signatures import Verifier, WebhookEvent, verify
from hookrelay.receiver.tracecontext import TraceContext, trace_context

__all__ = [
    "AsyncSeen",
    "BadSignature",
    "InvalidPayload",
    "MemorySeen",
    "MissingHeader",
    "Seen",
    "StaleTimestamp",
    "TraceContext",
    "VerificationError",
    "Verifier",
    "WebhookEvent",
    "trace_context",
    "verify",
]
