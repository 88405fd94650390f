"""Trace context end to end, and OpenTelemetry spans (``hookrelay.outbox.tracing``,
``hookrelay.service.api.tracing``).

Without OpenTelemetry: the submitter's ``traceparent`` reaches a real receiver on
127.0.0.1 with every attempt's own span id, a malformed one is ignored. With the SDK's
in-memory exporter: the spans of the API's requests, the executor's state changes and
the attempts, their names, attributes and parents. Once through a real ``hookrelay
serve`` exporting over OTLP/HTTP to a collector of our own that decodes the protobuf.
Tracing off imports no OpenTelemetry at all.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import psycopg
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import hookrelay.outbox.sync
from hookrelay.outbox import complete_task, report_progress, start_task, tracing
from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from hookrelay.receiver import TraceContext, trace_context, verify
from hookrelay.service.api.tracing import TracingMiddleware
from hookrelay.service.server.app import create_app
from hookrelay.service.server.prerequisites import Runtime
from tests.receiver import Receiver, failing_until_healthy
from tests.support import (
    ADMIN,
    ROOT,
    bearer,
    dispatcher,
    dispatcher_env,
    eventually,
    free_port,
    serving,
    wait_drained,
)

pytestmark = pytest.mark.anyio

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
SUBMITTER = f"00-{TRACE}-{SPAN}-01"
EXECUTOR_TRACE = "0af7651916cd43dd8448eb211c80319c"
EXECUTOR = f"00-{EXECUTOR_TRACE}-b7ad6b7169203331-01"
HOOK = "http://127.0.0.1:9/hook"


def _trace_of(headers: dict[str, str]) -> TraceContext:
    ctx = trace_context(headers)
    assert ctx is not None, headers
    return ctx


async def _submit(c: httpx.AsyncClient, key: str, url: str, **headers: str) -> str:
    r = await c.post(
        "/v1/tasks", json={"type": "t", "callbackUrl": url}, headers={**bearer(key), **headers}
    )
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


# -- the trace context, tracing off ------------------------------------------------------


async def test_the_submitters_trace_reaches_the_receiver_with_each_attempts_span(
    client: httpx.AsyncClient, tenant: dict[str, Any], runtime: Runtime, pool: asyncpg.Pool
) -> None:
    assert not tracing.enabled()
    rx = await failing_until_healthy(503).start()
    try:
        headers = {"traceparent": SUBMITTER, "tracestate": "congo=t61rcWkgMzE"}
        task_id = await _submit(client, tenant["apiKey"], rx.url, **headers)
        r = await client.post(
            f"/v1/tasks/{task_id}/complete",
            json={"status": "succeeded"},
            headers={**ADMIN, "traceparent": EXECUTOR},
        )
        assert r.status_code == 200, r.text
        async with running(dispatcher(runtime, pool)):
            await rx.wait_for(1)
            rx.state["healthy"]["ok"] = True
            await wait_drained(pool)
    finally:
        await rx.stop()
    assert len(rx.received) >= 2
    seen = [_trace_of(got.headers) for got in rx.received]
    # The submitter's trace and flags, never the executor's; each attempt its own span.
    assert {ctx.trace_id for ctx in seen} == {TRACE}
    assert {ctx.flags for ctx in seen} == {1}
    assert {ctx.state for ctx in seen} == {"congo=t61rcWkgMzE"}
    spans = [ctx.span_id for ctx in seen]
    assert len(set(spans)) == len(spans) and SPAN not in spans
    # What a receiver reads to continue the trace.
    last = rx.received[-1]
    event = verify(last.headers, last.body, secrets=[tenant["signingSecret"]])
    assert event.trace == seen[-1]


async def test_a_malformed_traceparent_is_ignored_and_the_task_starts_a_trace(
    client: httpx.AsyncClient,
    tenant: dict[str, Any],
    runtime: Runtime,
    pool: asyncpg.Pool,
    receiver: Receiver,
) -> None:
    bad = await _submit(
        client, tenant["apiKey"], receiver.url, traceparent=f"00-{TRACE}-{'0' * 16}-01"
    )
    # A valid traceparent keeps its trace; its malformed tracestate alone is dropped.
    bad_state = await _submit(
        client, tenant["apiKey"], receiver.url, traceparent=SUBMITTER, tracestate="a=1,a=2"
    )
    plain = await _submit(client, tenant["apiKey"], receiver.url)
    for task_id in (bad, bad_state, plain):
        r = await client.post(
            f"/v1/tasks/{task_id}/complete",
            json={"status": "succeeded"},
            headers={**ADMIN, "traceparent": "nonsense"},
        )
        assert r.status_code == 200, r.text
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(3)
    by_task = {
        json.loads(got.body)["data"]["id"]: (_trace_of(got.headers), got.headers)
        for got in receiver.received
    }
    assert by_task[bad][0].trace_id != TRACE
    assert not by_task[bad][0].sampled  # a trace of its own, nobody records it
    assert by_task[bad_state][0].trace_id == TRACE
    assert "tracestate" not in by_task[bad_state][1]
    assert by_task[plain][0].trace_id not in (TRACE, by_task[bad][0].trace_id)
    # With no trace context kept, the trace-id is derived from the event id: every
    # attempt, replay and redelivery of the event shares it.
    for task_id in (bad, plain):
        ctx, headers = by_task[task_id]
        assert f"00-{ctx.trace_id}" == tracing.derived(headers["webhook-id"])[0][:35]
    assert await pool.fetchval("SELECT count(*) FROM task_traces") == 1


async def test_an_idempotent_submit_keeps_the_first_trace_context(
    client: httpx.AsyncClient, tenant: dict[str, Any], pool: asyncpg.Pool
) -> None:
    key = {"Idempotency-Key": "order-1"}
    first = await _submit(client, tenant["apiKey"], HOOK, traceparent=SUBMITTER, **key)
    again = await _submit(client, tenant["apiKey"], HOOK, traceparent=EXECUTOR, **key)
    assert first == again
    rows = await pool.fetch("SELECT task_id, traceparent FROM task_traces")
    assert [tuple(r) for r in rows] == [(first, SUBMITTER)]


# -- spans, with the SDK's in-memory exporter --------------------------------------------


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_opentelemetry(provider)
    try:
        yield exporter
    finally:
        tracing.reset()


@pytest.fixture
async def traced(
    spans: InMemorySpanExporter, runtime: Runtime, pool: asyncpg.Pool
) -> AsyncIterator[httpx.AsyncClient]:
    """The API with tracing on (its request spans are a middleware added at creation)."""
    app = create_app(runtime, pool=pool)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hookrelay.test") as c:
            yield c


def _named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name]


def _hex(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def _parent(span: ReadableSpan) -> str | None:
    return None if span.parent is None else f"{span.parent.span_id:016x}"


async def test_spans_of_requests_changes_and_attempts_share_the_submitters_trace(
    traced: httpx.AsyncClient,
    spans: InMemorySpanExporter,
    runtime: Runtime,
    pool: asyncpg.Pool,
    receiver: Receiver,
) -> None:
    r = await traced.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)
    tenant = r.json()
    task_id = await _submit(traced, tenant["apiKey"], receiver.url, traceparent=SUBMITTER)
    r = await traced.post(f"/v1/tasks/{task_id}/start", headers={**ADMIN, "traceparent": EXECUTOR})
    assert r.status_code == 200, r.text
    r = await traced.post(
        f"/v1/tasks/{task_id}/complete",
        json={"status": "failed", "error": {"why": "no"}},
        headers={**ADMIN, "traceparent": EXECUTOR},
    )
    assert r.status_code == 200, r.text
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(1)
        await eventually(lambda: _named(spans, "hookrelay.attempt"), 10)

    (submit,) = _named(spans, "POST /v1/tasks")
    assert submit.kind == SpanKind.SERVER
    assert _hex(submit)[0] == TRACE and _parent(submit) == SPAN
    assert submit.attributes is not None
    assert submit.attributes["http.response.status_code"] == 202
    assert submit.attributes["http.route"] == "/v1/tasks"

    # The executor's calls: the request's span is a child of the executor's traceparent,
    # the state change's span (the transaction) a child of the request's.
    (request,) = _named(spans, "POST /v1/tasks/{task_id}/complete")
    (change,) = _named(spans, "hookrelay.task.complete")
    assert _hex(request)[0] == EXECUTOR_TRACE == _hex(change)[0]
    assert _parent(change) == _hex(request)[1]
    assert change.attributes == {"hookrelay.task.id": task_id, "hookrelay.task.status": "failed"}
    (started,) = _named(spans, "hookrelay.task.start")
    assert _hex(started)[0] == EXECUTOR_TRACE

    # The attempt: in the submitter's trace, its span id the one the receiver got.
    (attempt,) = _named(spans, "hookrelay.attempt")
    assert attempt.kind == SpanKind.CLIENT
    trace_id, span_id = _hex(attempt)
    assert trace_id == TRACE and _parent(attempt) == SPAN
    sent = _trace_of(receiver.received[0].headers)
    assert (sent.trace_id, sent.span_id, sent.flags) == (TRACE, span_id, 1)
    attrs = dict(attempt.attributes or {})
    assert attrs["http.response.status_code"] == 204
    assert attrs["hookrelay.attempt.number"] == 1
    assert attrs["server.address"] == "127.0.0.1"
    assert attrs["hookrelay.attempt.outcome"] == "delivered"
    assert attrs["hookrelay.task.id"] == task_id
    assert isinstance(attrs["hookrelay.attempt.duration_ms"], float)
    assert attempt.status.status_code == StatusCode.UNSET


async def test_a_failed_attempt_span_and_a_request_without_a_route(
    traced: httpx.AsyncClient,
    spans: InMemorySpanExporter,
    runtime: Runtime,
    pool: asyncpg.Pool,
) -> None:
    r = await traced.get("/nowhere")
    assert r.status_code == 404
    (lost,) = _named(spans, "GET")
    assert lost.attributes is not None and lost.attributes["http.response.status_code"] == 404

    r = await traced.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)
    tenant = r.json()
    rx = await failing_until_healthy(500).start()
    try:
        # No traceparent: the task keeps the submit request's own span as its trace.
        task_id = await _submit(traced, tenant["apiKey"], rx.url)
        r = await traced.post(
            f"/v1/tasks/{task_id}/complete", json={"status": "succeeded"}, headers=ADMIN
        )
        async with running(dispatcher(runtime, pool)):
            await rx.wait_for(1)
            await eventually(lambda: _named(spans, "hookrelay.attempt"), 10)
    finally:
        await rx.stop()
    (submit,) = _named(spans, "POST /v1/tasks")
    attempt = _named(spans, "hookrelay.attempt")[0]
    assert _hex(attempt)[0] == _hex(submit)[0] and _parent(attempt) == _hex(submit)[1]
    assert attempt.status.status_code == StatusCode.ERROR
    assert attempt.attributes is not None
    assert attempt.attributes["http.response.status_code"] == 500
    assert attempt.attributes["hookrelay.attempt.outcome"] in ("retry", "dead")


async def test_a_5xx_answer_marks_the_request_span_failed(
    spans: InMemorySpanExporter,
) -> None:
    async def broken(request: Request) -> Response:
        return Response("no", status_code=503)

    app = TracingMiddleware(Starlette(routes=[Route("/broken", broken)]))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        assert (await c.get("/broken", headers={"traceparent": SUBMITTER})).status_code == 503
    (span,) = _named(spans, "GET /broken")
    assert span.status.status_code == StatusCode.ERROR and _hex(span)[0] == TRACE


async def test_the_executors_library_calls_take_its_traceparent(
    spans: InMemorySpanExporter, runtime: Runtime, pool: asyncpg.Pool
) -> None:
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "acme", runtime.secret_box)
        spec = NewTask(type="t", callback_url="http://127.0.0.1:9/h")
        a, _ = await create_task(conn, tenant.id, spec)
        b, _ = await create_task(conn, tenant.id, spec)
        c, _ = await create_task(conn, tenant.id, spec)
        async with conn.transaction():
            await start_task(conn, a.id, traceparent=EXECUTOR, tracestate="x=1")
            await report_progress(conn, a.id, 50, traceparent=EXECUTOR)
            await complete_task(conn, a.id, "succeeded", traceparent=EXECUTOR)
        # A malformed traceparent is ignored: the span is a root of its own trace.
        await hookrelay.outbox.cancel_task(conn, b.id, traceparent="00-nope")
    with psycopg.connect(runtime.dsn) as sync_conn:
        hookrelay.outbox.sync.start_task(sync_conn, c.id, traceparent=EXECUTOR)
        hookrelay.outbox.sync.report_progress(sync_conn, c.id, 10, traceparent=EXECUTOR)
        hookrelay.outbox.sync.cancel_task(sync_conn, c.id, traceparent=EXECUTOR)
    names = [s.name for s in spans.get_finished_spans()]
    assert names == [
        "hookrelay.task.start",
        "hookrelay.task.progress",
        "hookrelay.task.complete",
        "hookrelay.task.complete",
        "hookrelay.task.start",
        "hookrelay.task.progress",
        "hookrelay.task.complete",
    ]
    done = spans.get_finished_spans()
    for i in (0, 1, 2, 4, 5, 6):
        assert _hex(done[i])[0] == EXECUTOR_TRACE and _parent(done[i]) == "b7ad6b7169203331"
    assert done[0].context is not None and done[0].context.trace_state.get("x") == "1"
    assert _hex(done[3])[0] != EXECUTOR_TRACE and done[3].parent is None
    assert done[3].attributes is not None
    assert done[3].attributes["hookrelay.task.status"] == "cancelled"
    # Tasks made with no trace context and no current span keep none.
    assert await pool.fetchval("SELECT count(*) FROM task_traces") == 0


async def test_a_failing_change_marks_its_span(
    spans: InMemorySpanExporter, runtime: Runtime, pool: asyncpg.Pool
) -> None:
    async with pool.acquire() as conn:
        with pytest.raises(Exception, match="not found"):
            await complete_task(conn, "task_missing", "succeeded", traceparent=EXECUTOR)
    (span,) = spans.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR


# -- turning tracing on ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ],
)
def test_wanted(env: dict[str, str], wanted: bool) -> None:
    assert tracing.wanted(env) is wanted


def test_configure_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert not tracing.configure_from_env()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    try:
        assert tracing.configure_from_env(version="9.9")
        assert tracing.enabled() and tracing.configure_from_env()
        assert tracing.current() is None  # no span is current
        with tracing.span("outer") as outer:
            assert outer is not None
            now = tracing.current()
            assert now is not None and now.span_id == f"{outer.get_span_context().span_id:016x}"
    finally:
        tracing.reset()
    assert not tracing.enabled()


def test_without_the_extra_tracing_stays_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    assert not tracing.configure_from_env()
    assert not tracing.enabled()
    assert "hookrelay-server[otel]" in caplog.text


OFF = textwrap.dedent(
    """
    import json, os, sys
    from hookrelay.service.server import app, background
    from hookrelay.service.api import tracing as api_tracing
    from hookrelay.outbox import tracing
    import hookrelay.outbox, hookrelay.outbox.sync, hookrelay.receiver

    on = api_tracing.configure()
    with tracing.span("x") as span, tracing.change("complete", "task_1", sys.argv[1]):
        pass
    header = tracing.attempt_traceparent(sys.argv[1], tracing.start("y", parent=None))
    print(json.dumps({
        "on": on, "span": span, "header": header,
        "otel": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
    }))
    """
)


async def test_tracing_off_imports_no_opentelemetry() -> None:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    child = await asyncio.create_subprocess_exec(
        *(sys.executable, "-c", OFF, SUBMITTER),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 0, err.decode()
    seen = json.loads(out)
    assert seen["otel"] == [] and seen["on"] is False and seen["span"] is None
    ctx = tracing.parse(seen["header"])
    assert ctx is not None and ctx.trace_id == TRACE and ctx.span_id != SPAN


# -- end to end: a real hookrelay serve exporting to a real OTLP/HTTP collector ----------


class Collector:
    """An OTLP/HTTP traces endpoint on loopback that decodes what it is sent."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _traces(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(await request.read())
        for resource in export.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        {
                            "service": service.get("service.name"),
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "attributes": {
                                a.key: getattr(a.value, a.value.WhichOneof("value"))
                                for a in span.attributes
                            },
                        }
                    )
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    async def start(self) -> Collector:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def named(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"] == name]


@pytest.mark.slow
async def test_spans_exported_over_otlp_by_a_real_process(
    runtime: Runtime, dsn: str, receiver: Receiver
) -> None:
    collector = await Collector().start()
    env = {
        **dispatcher_env(runtime, dsn),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.port}",
        "OTEL_SERVICE_NAME": "hookrelay-e2e",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    try:
        async with serving("serve", env) as url, httpx.AsyncClient(base_url=url) as c:
            r = await c.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)
            task_id = await _submit(c, r.json()["apiKey"], receiver.url, traceparent=SUBMITTER)
            r = await c.post(
                f"/v1/tasks/{task_id}/complete",
                json={"status": "succeeded"},
                headers={**ADMIN, "traceparent": EXECUTOR},
            )
            assert r.status_code == 200, r.text
            await receiver.wait_for(1, timeout=30)
            await eventually(
                lambda: (
                    collector.named("hookrelay.attempt")
                    and collector.named("hookrelay.task.complete")
                ),
                30,
                what="the attempt's and the completion's spans at the collector",
            )
    finally:
        await collector.stop()
    (attempt,) = collector.named("hookrelay.attempt")
    sent = _trace_of(receiver.received[0].headers)
    assert attempt["service"] == "hookrelay-e2e"
    assert (attempt["trace_id"], attempt["parent"]) == (TRACE, SPAN)
    assert attempt["span_id"] == sent.span_id and sent.trace_id == TRACE
    assert attempt["attributes"]["http.response.status_code"] == 204
    assert attempt["attributes"]["hookrelay.attempt.number"] == 1
    assert attempt["attributes"]["server.address"] == "127.0.0.1"
    assert attempt["attributes"]["hookrelay.attempt.duration_ms"] > 0
    (submit,) = collector.named("POST /v1/tasks")
    assert (submit["trace_id"], submit["parent"]) == (TRACE, SPAN)
    (change,) = collector.named("hookrelay.task.complete")
    (request,) = collector.named("POST /v1/tasks/{task_id}/complete")
    assert change["trace_id"] == EXECUTOR_TRACE and change["parent"] == request["span_id"]
