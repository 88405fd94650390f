"""Trace context and OpenTelemetry spans, at no cost when tracing is off.

Every task keeps the W3C trace context its submitter sent (``traceparent``,
``tracestate``), and every attempt of its webhook carries a ``traceparent`` of that
trace with the attempt's own span id (a task submitted without one: a trace-id derived
from its event id). That much needs nothing but this module.

Spans are exported only when tracing is on: :func:`configure_from_env` (hookrelay's
processes call it at start) turns it on when the standard ``OTEL_EXPORTER_OTLP_*``
variables name an endpoint and ``pip install 'hookrelay-server[otel]'`` brought the
OpenTelemetry SDK; an executor whose process has OpenTelemetry set up already calls
:func:`use_opentelemetry` to have ``complete_task`` and friends record their spans with
its provider. Until then nothing here imports ``opentelemetry``, and each traced call
costs one test of a module global.

The spans: the API's requests (``service.api.tracing``), the executor's calls as
``hookrelay.task.<change>`` (the statement, or the caller's transaction, that writes
the state change and its outbox row), and each delivery attempt as
``hookrelay.attempt``, a child of the task's trace context.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

from hookrelay.receiver.tracecontext import TraceContext, new_span_id, parse

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "TraceContext",
    "attempt_traceparent",
    "change",
    "configure_from_env",
    "current",
    "derived",
    "enabled",
    "parse",
    "reset",
    "span",
    "use_opentelemetry",
    "wanted",
]

log = logging.getLogger("hookrelay")

SpanKind = Literal["internal", "server", "client"]
Attributes = Mapping[str, str | int | float | bool]
INSTRUMENTATION = "hookrelay"

# The tracer while tracing is on; None is off (the only state that costs nothing).
_tracer: Tracer | None = None
# The provider this module made from the environment (flushed and shut down by reset).
_own_provider: TracerProvider | None = None


def enabled() -> bool:
    return _tracer is not None


def wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for spans: an OTLP endpoint is named (for traces
    or for every signal), the SDK is not disabled and the traces exporter is not
    ``none``."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


def configure_from_env(*, version: str | None = None) -> bool:
    """Turn tracing on if the environment asks for it (:func:`wanted`): spans go to
    the OTLP/HTTP endpoint of ``OTEL_EXPORTER_OTLP_*`` in batches, from a resource named
    by ``OTEL_SERVICE_NAME`` (default ``hookrelay``). Whether tracing is on. Without the
    ``otel`` extra installed it stays off, with a warning."""
    global _own_provider
    if _tracer is not None:
        return True
    if not wanted():
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_* is set but OpenTelemetry is not installed: no spans are "
            "exported (pip install 'hookrelay-server[otel]')"
        )
        return False
    attributes: dict[str, str] = {}
    if not os.environ.get("OTEL_SERVICE_NAME", "").strip():
        attributes["service.name"] = "hookrelay"
    if version:
        attributes["service.version"] = version
    provider = TracerProvider(resource=Resource.create(attributes))
    # The exporter reads its endpoint, headers, timeout and compression from the
    # standard variables itself.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    use_opentelemetry(provider)
    _own_provider = provider
    log.info("tracing on: spans exported over OTLP/HTTP")
    return True


def use_opentelemetry(provider: TracerProvider | None = None) -> None:
    """Record spans with ``provider``'s tracer (default: OpenTelemetry's global
    provider, for an executor that set OpenTelemetry up itself)."""
    global _tracer
    from opentelemetry import trace

    source = provider if provider is not None else trace.get_tracer_provider()
    _tracer = source.get_tracer(INSTRUMENTATION)


def reset() -> None:
    """Tracing off again; a provider :func:`configure_from_env` made is flushed and shut down."""
    global _tracer, _own_provider
    _tracer = None
    if _own_provider is not None:
        _own_provider.shutdown()
        _own_provider = None


def _context(parent: TraceContext | None) -> Context | None:
    """OpenTelemetry's context with ``parent`` as the remote parent; None: the current one."""
    if parent is None:
        return None
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    state = TraceState.from_header([parent.state]) if parent.state else None
    remote = SpanContext(
        int(parent.trace_id, 16),
        int(parent.span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(parent.flags),
        trace_state=state,
    )
    return trace.set_span_in_context(NonRecordingSpan(remote))


def _kind(kind: SpanKind) -> object:
    from opentelemetry.trace import SpanKind as Kind

    return {"internal": Kind.INTERNAL, "server": Kind.SERVER, "client": Kind.CLIENT}[kind]


def _as_trace(otel: Span, state: str | None = None) -> TraceContext:
    ctx = otel.get_span_context()
    return TraceContext(f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}", int(ctx.trace_flags), state)


@contextmanager
def span(
    name: str,
    *,
    parent: TraceContext | None = None,
    kind: SpanKind = "internal",
    attributes: Attributes | None = None,
) -> Iterator[Span | None]:
    """A span around the block, a child of ``parent`` (default: the current span), made
    current inside it; None when tracing is off. An exception marks it failed."""
    if _tracer is None:
        yield None
        return
    with _tracer.start_as_current_span(
        name,
        context=_context(parent),
        kind=_kind(kind),  # type: ignore[arg-type]
        attributes=attributes,
    ) as otel:
        yield otel


def start(
    name: str,
    *,
    parent: TraceContext | None,
    kind: SpanKind = "internal",
    attributes: Attributes | None = None,
) -> Span | None:
    """A span the caller ends (not made current); None when tracing is off."""
    if _tracer is None:
        return None
    return _tracer.start_span(
        name,
        context=_context(parent),
        kind=_kind(kind),  # type: ignore[arg-type]
        attributes=attributes,
    )


def current() -> TraceContext | None:
    """The current span's context when tracing is on and a span is recording, else None."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    otel = trace.get_current_span()
    if not otel.get_span_context().is_valid:
        return None
    return _as_trace(otel)


def attempt_traceparent(stored: str, otel: Span | None) -> str:
    """The ``traceparent`` of one attempt of an event whose task keeps ``stored``: the
    same trace and flags, and the attempt's own span id (its span's, when traced)."""
    if otel is not None:
        ctx = otel.get_span_context()
        if ctx.is_valid:
            return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    return f"00-{stored[3:35]}-{new_span_id()}-{stored[53:55]}"


def derived(event_id: str) -> tuple[str, None]:
    """The trace context of an event whose task keeps none (submitted without one, or
    a test event): a trace-id and parent id hashed from the event id, so that every
    attempt, replay and redelivery shares one trace; not sampled."""
    digest = hashlib.sha256(event_id.encode()).hexdigest()
    return f"00-{digest[:32]}-{digest[32:48]}-00", None


def failed(otel: Span, description: str | None) -> None:
    """Mark ``otel`` as failed."""
    from opentelemetry.trace import Status, StatusCode

    otel.set_status(Status(StatusCode.ERROR, description))


@contextmanager
def change(
    what: str,
    task_id: str,
    traceparent: str | None = None,
    tracestate: str | None = None,
    **attributes: str,
) -> Iterator[None]:
    """The span ``hookrelay.task.<what>`` around an executor's state change (the
    statement or transaction that writes it, and its outbox row for a terminal one): a
    child of the executor's ``traceparent`` when it is valid (a malformed one is
    ignored), else of the current span. Nothing when tracing is off."""
    if _tracer is None:
        yield
        return
    attrs = {"hookrelay.task.id": task_id}
    attrs.update({f"hookrelay.task.{k}": v for k, v in attributes.items()})
    with span(f"hookrelay.task.{what}", parent=parse(traceparent, tracestate), attributes=attrs):
        yield
