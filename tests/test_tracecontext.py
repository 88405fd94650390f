"""``hookrelay.receiver.tracecontext``: W3C traceparent/tracestate parsed as the
specification says, malformed values ignored, and the trace context of a verified webhook."""

from __future__ import annotations

import time

import pytest

from hookrelay.outbox.keys.signing import Signer, generate_secret
from hookrelay.receiver import TraceContext, trace_context, verify
from hookrelay.receiver.tracecontext import (
    MAX_TRACESTATE,
    new_span_id,
    parse,
    parse_traceparent,
    parse_tracestate,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
GOOD = f"00-{TRACE}-{SPAN}-01"


def test_a_valid_traceparent() -> None:
    assert parse_traceparent(GOOD) == (TRACE, SPAN, 1)
    ctx = parse(GOOD, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
    assert ctx == TraceContext(TRACE, SPAN, 1, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
    assert ctx.sampled and ctx.traceparent == GOOD
    assert ctx.headers() == {"traceparent": GOOD, "tracestate": ctx.state}
    assert TraceContext(TRACE, SPAN).headers() == {"traceparent": f"00-{TRACE}-{SPAN}-00"}


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        f"00-{TRACE.upper()}-{SPAN}-01",  # uppercase hex
        f"00-{'0' * 32}-{SPAN}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero parent id
        f"ff-{TRACE}-{SPAN}-01",  # version ff is invalid
        f"0g-{TRACE}-{SPAN}-01",  # version not hex
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 has exactly four fields
        f"00_{TRACE}-{SPAN}-01",  # wrong separator
        f"00-{TRACE}-{SPAN}-0x",  # flags not hex
        f"00-{TRACE[:-1]}-{SPAN}-01",  # short trace id
        f"01-{TRACE}-{SPAN}-01x",  # a later version's extra field needs a dash
    ],
)
def test_a_malformed_traceparent_is_ignored(value: str | None) -> None:
    assert parse_traceparent(value) is None
    assert parse(value, "congo=t61rcWkgMzE") is None


def test_a_later_version_is_read_as_far_as_version_00_goes() -> None:
    assert parse_traceparent(f"cc-{TRACE}-{SPAN}-01-whatever") == (TRACE, SPAN, 1)
    assert parse_traceparent(f"cc-{TRACE}-{SPAN}-01") == (TRACE, SPAN, 1)


def test_several_traceparent_headers_are_malformed_and_tracestate_headers_join() -> None:
    assert parse([GOOD, GOOD]) is None
    assert parse([]) is None
    ctx = parse([GOOD], ["a=1", "b=2"])
    assert ctx is not None and ctx.state == "a=1,b=2"


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("a=1", "a=1"),
        (" a=1 , ,b=2\t", "a=1,b=2"),  # whitespace and empty members dropped
        ("tenant@system=v", "tenant@system=v"),
        ("0tenant@sys=v", "0tenant@sys=v"),
        ("a=1,a=2", None),  # a key twice
        ("A=1", None),  # keys are lowercase
        ("a", None),  # no value
        ("a=x,b", None),
        ("a=ends with space ", "a=ends with space"),  # the member's surrounding blanks go
        ("a=x=y", None),  # '=' in a value
        (",".join(f"k{i}=v" for i in range(33)), None),  # more than 32 members
        ("", None),
        (" , ", None),
        (None, None),
    ],
)
def test_tracestate(value: str | None, kept: str | None) -> None:
    assert parse_tracestate(value) == kept


def test_a_bad_tracestate_alone_is_dropped() -> None:
    ctx = parse(GOOD, "a=1,a=2")
    assert ctx == TraceContext(TRACE, SPAN, 1, None)


def test_a_long_tracestate_loses_members_from_the_end() -> None:
    members = [f"k{i}={'v' * 100}" for i in range(10)]
    kept = parse_tracestate(",".join(members))
    assert kept is not None and len(kept) <= MAX_TRACESTATE
    assert members[0] in kept and members[-1] not in kept


def test_new_traces_and_children() -> None:
    ctx = TraceContext.new()
    assert parse(ctx.traceparent) == ctx
    assert not ctx.sampled
    child = ctx.child()
    assert child.trace_id == ctx.trace_id and child.span_id != ctx.span_id
    assert ctx.child("1" * 16).span_id == "1" * 16
    assert len(new_span_id()) == 16


def test_trace_context_reads_headers_of_any_case() -> None:
    headers = {"TraceParent": GOOD, "TRACESTATE": "a=1", "x": "y"}
    assert trace_context(headers) == TraceContext(TRACE, SPAN, 1, "a=1")
    assert trace_context({"x": "y"}) is None


def test_verify_gives_the_attempts_trace_context() -> None:
    secret = generate_secret()
    body = b'{"type":"ping","timestamp":"2026-01-01T00:00:00Z","data":{}}'
    headers = Signer([secret]).headers("evt_1", int(time.time()), body)
    assert verify(headers, body, secrets=[secret]).trace is None
    headers["traceparent"] = GOOD
    event = verify(headers, body, secrets=[secret])
    assert event.trace == TraceContext(TRACE, SPAN, 1)
    headers["traceparent"] = "00-bad"
    assert verify(headers, body, secrets=[secret]).trace is None
