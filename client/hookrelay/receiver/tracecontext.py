"""W3C Trace Context (https://www.w3.org/TR/trace-context/): ``traceparent`` and
``tracestate``, parsed and checked.

hookrelay sends every webhook attempt with a ``traceparent`` in the trace of the task's
submitter, whose span id is that attempt's own. A receiver continues the trace from it::

    from hookrelay.receiver import trace_context

    trace = trace_context(request.headers)   # or verify(...).trace
    if trace is not None:
        log.info("webhook", extra={"trace_id": trace.trace_id, "parent_id": trace.span_id})

A malformed header is ignored, as the specification says: :func:`parse` answers None
for a bad ``traceparent``, and drops a bad ``tracestate`` alone. No OpenTelemetry is
needed (or imported); with it, ``TraceContextTextMapPropagator().extract(headers)`` reads
the same headers.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["TraceContext", "parse", "trace_context"]

_HEX = frozenset("0123456789abcdef")
# tracestate's list members: a simple key, or tenant@system; a value of printable
# ASCII without "," and "=", not ending in a space.
_KEY = re.compile(
    r"[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13}"
)
_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
MAX_MEMBERS = 32
# The specification asks vendors to pass on at least 512 characters; longer lists lose
# members from the end (the oldest), never a part of one.
MAX_TRACESTATE = 512
VERSION = "00"
SAMPLED = 0x01


def _hex(text: str, size: int) -> bool:
    return len(text) == size and _HEX.issuperset(text) and text != "0" * size


@dataclass(frozen=True, slots=True)
class TraceContext:
    """One position in a trace: ``trace_id`` (32 hex digits), the ``span_id`` of the
    caller's span (16), the trace ``flags`` and the vendors' ``state`` (``tracestate``)."""

    trace_id: str
    span_id: str
    flags: int = 0
    state: str | None = None

    @property
    def sampled(self) -> bool:
        return bool(self.flags & SAMPLED)

    @property
    def traceparent(self) -> str:
        """The ``traceparent`` header's value (version 00)."""
        return f"{VERSION}-{self.trace_id}-{self.span_id}-{self.flags:02x}"

    def headers(self) -> dict[str, str]:
        """``traceparent``, and ``tracestate`` when there is one."""
        out = {"traceparent": self.traceparent}
        if self.state:
            out["tracestate"] = self.state
        return out

    def child(self, span_id: str | None = None) -> TraceContext:
        """The same trace, flags and state from a new span (``span_id``, or a random one)."""
        return TraceContext(self.trace_id, span_id or new_span_id(), self.flags, self.state)

    @classmethod
    def new(cls) -> TraceContext:
        """A new trace (random ids, not sampled)."""
        return cls(secrets.token_hex(16), new_span_id())


def new_span_id() -> str:
    """A random span id: 16 hex digits, never all zeros."""
    while (span := secrets.token_hex(8)) == "0" * 16:  # pragma: no cover - 2**-64
        pass
    return span


def parse_traceparent(value: str | None) -> tuple[str, str, int] | None:
    """``(trace_id, span_id, flags)`` of a valid ``traceparent``, else None.

    Version 00 is exactly ``00-<32 hex>-<16 hex>-<2 hex>``, lowercase, with neither id
    all zeros. A later version may append fields after a dash; version ``ff`` is invalid.
    """
    if value is None:
        return None
    value = value.strip(" \t")
    if len(value) < 55:
        return None
    version = value[:2]
    if not (len(version) == 2 and _HEX.issuperset(version)) or version == "ff":
        return None
    if version == VERSION and len(value) != 55:
        return None
    if len(value) > 55 and value[55] != "-":
        return None
    if value[2] != "-" or value[35] != "-" or value[52] != "-":
        return None
    trace_id, span_id, flags = value[3:35], value[36:52], value[53:55]
    if not (_hex(trace_id, 32) and _hex(span_id, 16) and _HEX.issuperset(flags)):
        return None
    return trace_id, span_id, int(flags, 16)


def parse_tracestate(value: str | None) -> str | None:
    """A valid ``tracestate`` with its empty members dropped (and members past
    :data:`MAX_TRACESTATE` characters from the end), or None if it is malformed:
    more than 32 members, a bad key or value, a key twice."""
    if not value:
        return None
    members: list[str] = []
    keys: set[str] = set()
    for raw in value.split(","):
        member = raw.strip(" \t")
        if not member:
            continue
        key, eq, val = member.partition("=")
        if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(val) or key in keys:
            return None
        keys.add(key)
        members.append(member)
    if not members or len(members) > MAX_MEMBERS:
        return None
    while len(",".join(members)) > MAX_TRACESTATE:
        members.pop()
    return ",".join(members) or None


def parse(
    traceparent: str | Iterable[str] | None, tracestate: str | Iterable[str] | None = None
) -> TraceContext | None:
    """The trace context of a request's headers, or None if ``traceparent`` is absent or
    malformed (``tracestate`` is then ignored too). Several ``traceparent`` values are
    malformed; several ``tracestate`` values are one list, in order."""
    if traceparent is not None and not isinstance(traceparent, str):
        given = list(traceparent)
        if len(given) != 1:
            return None
        traceparent = given[0]
    parsed = parse_traceparent(traceparent)
    if parsed is None:
        return None
    if tracestate is not None and not isinstance(tracestate, str):
        tracestate = ",".join(tracestate)
    trace_id, span_id, flags = parsed
    return TraceContext(trace_id, span_id, flags, parse_tracestate(tracestate))


def trace_context(headers: Mapping[str, str]) -> TraceContext | None:
    """The trace context of a webhook's (or any request's) headers, whatever the case
    of the mapping's keys; None without a valid ``traceparent``."""
    found: dict[str, str] = {}
    for key, value in headers.items():
        name = key.lower()
        if name in ("traceparent", "tracestate"):
            found[name] = f"{found[name]},{value}" if name in found else value
    return parse(found.get("traceparent"), found.get("tracestate"))
