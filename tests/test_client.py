"""``hookrelay.client.Client`` against a live ``hookrelay serve``: every call, lost answers,
waits, streams across a restart, and the error tree as the server answers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest

from hookrelay.client import (
    Client,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    TaskEvent,
    TransportError,
    Unauthorized,
    WaitTimeout,
)
from hookrelay.outbox import sync as executor
from hookrelay.receiver import verify
from tests.clientfakes import FakeClock
from tests.support import (
    ADMIN_TOKEN,
    LosingProxy,
    ServeProcess,
    WebhookSink,
    bearer,
    free_port,
    until,
)

HOOK = "http://127.0.0.1:9/hook"


class Recorder(httpx.HTTPTransport):
    """The real transport, keeping each request sent and each status answered."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []
        self.statuses: list[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        response = super().handle_request(request)
        self.statuses.append(response.status_code)
        return response


@pytest.fixture
def partner(hookrelay_serve: ServeProcess) -> dict[str, Any]:
    return hookrelay_serve.tenant()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def client(hookrelay_serve, partner, recorder) -> Iterator[Client]:
    url, key = hookrelay_serve.url, partner["apiKey"]
    with Client(url, key, admin_token=ADMIN_TOKEN, transport=recorder) as c:
        yield c


@pytest.fixture
def sink() -> Iterator[WebhookSink]:
    rx = WebhookSink()
    yield rx
    rx.close()


def in_thread(fn, *args: Any) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn(*args)`` in a thread; its result (or exception) lands in the list."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn(*args))
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_submit_then_get_with_etag(client, recorder) -> None:
    task = client.submit("render", input={"page": 1}, callback_url=HOOK, metadata={"m": 1})
    assert (task.status, task.version, task.input, task.metadata) == (
        "queued",
        1,
        {"page": 1},
        {"m": 1},
    )
    key = recorder.sent[0].headers["idempotency-key"]
    assert key  # one generated when none is given
    first = client.get(task.id)
    assert first == task
    again = client.get(task.id)
    # Unchanged: the server answered 304 and the client gave back what it had.
    assert recorder.sent[-1].headers["if-none-match"] and recorder.statuses[-1] == 304
    assert again is first
    client.start(task.id)
    assert client.get(task.id).status == "running" and recorder.statuses[-1] == 200


def test_a_given_idempotency_key_gives_the_same_task(client) -> None:
    a = client.submit("t", callback_url=HOOK, idempotency_key="order-1")
    b = client.submit("t", callback_url=HOOK, idempotency_key="order-1")
    assert a.id == b.id
    with pytest.raises(InvalidRequest) as refused:
        client.submit("other", callback_url=HOOK, idempotency_key="order-1")
    assert refused.value.status == 422 and refused.value.code == "idempotency_key_reused"


def test_a_lost_answer_is_sent_again_with_the_same_key_and_makes_one_task(
    hookrelay_serve, partner
) -> None:
    proxy, recorder = LosingProxy(hookrelay_serve.port), Recorder()
    try:
        with Client(proxy.url, partner["apiKey"], transport=recorder) as c:
            task = c.submit("t", input={"n": 1}, callback_url=HOOK)
            listed = list(c.tasks())
    finally:
        proxy.close()
    posts = [r for r in recorder.sent if r.method == "POST"]
    keys = {r.headers["idempotency-key"] for r in posts}
    assert len(posts) == 2 and len(keys) == 1  # sent twice, with one key
    assert proxy.lost == 1
    assert [t.id for t in listed] == [task.id]  # one task created


def test_a_lost_answer_to_complete_takes_the_409_of_its_own_outcome(
    hookrelay_serve, partner
) -> None:
    with Client(hookrelay_serve.url, partner["apiKey"]) as c:
        task = c.submit("t", callback_url=HOOK)
    proxy = LosingProxy(hookrelay_serve.port)
    try:
        with Client(proxy.url, admin_token=ADMIN_TOKEN) as executor_client:
            done = executor_client.complete(task.id, "succeeded", result={"ok": 1})
            assert proxy.lost == 1
            assert (done.status, done.result, done.version) == ("succeeded", {"ok": 1}, 2)
            # Another outcome is a real conflict, sent once or twice.
            with pytest.raises(Conflict) as conflict:
                executor_client.complete(task.id, "failed")
    finally:
        proxy.close()
    current = conflict.value.task
    assert current is not None and current.status == "succeeded"


def test_a_refused_connection_is_a_transport_error_after_the_retries() -> None:
    clock = FakeClock()
    nowhere = f"http://127.0.0.1:{free_port()}"
    with Client(nowhere, "hrk_x", clock=clock) as c, pytest.raises(TransportError) as lost:
        c.get("task_x")
    assert lost.value.sent is False
    assert clock.slept == [0.2, 0.4, 0.8, 1.6]  # five attempts in all


def test_wait_returns_when_the_task_completes_meanwhile(client, recorder, hookrelay_serve) -> None:
    task = client.submit("t", callback_url=HOOK)
    thread, out = in_thread(client.wait, task.id, 30)
    until(lambda: any("wait" in r.url.params for r in recorder.sent), what="a long poll sent")
    with Client(hookrelay_serve.url, admin_token=ADMIN_TOKEN) as other:
        other.start(task.id)
        other.complete(task.id, "failed", error={"code": "blank"})
    thread.join(30)
    (done,) = out
    assert (done.status, done.error) == ("failed", {"code": "blank"})


def test_wait_on_a_finished_task_answers_at_once(client) -> None:
    task = client.submit("t", callback_url=HOOK)
    client.cancel(task.id)
    assert client.wait(task.id, timeout=30).status == "cancelled"


def test_wait_times_out_with_the_last_state(client) -> None:
    task = client.submit("t", callback_url=HOOK)
    client.start(task.id)
    with pytest.raises(WaitTimeout) as late:
        client.wait(task.id, timeout=0.3)
    assert late.value.task is not None and late.value.task.status == "running"


def test_follow_a_task_to_its_end_with_progress(client) -> None:
    task = client.submit("t", callback_url=HOOK)
    events: list[TaskEvent] = []
    thread, out = in_thread(lambda: events.extend(client.follow(task.id)))
    until(lambda: events, what="the current state")
    client.start(task.id)
    client.progress(task.id, 40, "reading")
    client.complete(task.id, "succeeded", result={"pages": 2})
    thread.join(30)
    assert out == [None]
    assert [(e.id, e.kind, e.task.status) for e in events] == [
        (1, "change", "queued"),
        (2, "change", "running"),
        (3, "progress", "running"),
        (4, "change", "succeeded"),
    ]
    p = events[2].task.progress
    assert p is not None and (p.percent, p.message) == (40, "reading")
    # Resuming from the final version: nothing more (the server answers 204).
    assert list(client.follow(task.id, last_event_id=4)) == []


@pytest.mark.slow
def test_follow_resumes_across_a_server_restart_with_no_gap(
    client, hookrelay_serve, module_dsn
) -> None:
    task = client.submit("t", callback_url=HOOK)
    client.start(task.id)
    events: list[TaskEvent] = []
    thread, out = in_thread(lambda: events.extend(client.follow(task.id)))
    until(lambda: events, what="the current state")
    hookrelay_serve.stop()
    try:
        # Changes while no server runs: an executor's own transactions.
        with psycopg.connect(module_dsn) as conn:
            executor.report_progress(conn, task.id, 50, "half")
            conn.commit()
            executor.report_progress(conn, task.id, 90)
            conn.commit()
    finally:
        hookrelay_serve.start()
    until(lambda: len(events) == 3 or out, timeout=30, what="the missed changes")
    client.complete(task.id, "succeeded")
    thread.join(30)
    assert out == [None]
    assert [e.id for e in events] == [2, 3, 4, 5]  # every version once, in order
    assert [e.kind for e in events] == ["change", "progress", "progress", "change"]


def test_tasks_iterates_every_page(client) -> None:
    ids = [client.submit("t", callback_url=HOOK).id for _ in range(5)]
    assert [t.id for t in client.tasks(page_size=2)] == ids
    client.cancel(ids[1])
    assert [t.id for t in client.tasks(status="cancelled")] == [ids[1]]
    later = client.get(ids[1]).updated_at
    assert [t.id for t in client.tasks(updated_after=later)] == []
    assert {t.id for t in client.tasks(updated_after=datetime(2000, 1, 1, tzinfo=UTC))} == set(ids)
    with pytest.raises(ValueError, match="time zone"):
        list(client.tasks(updated_after=datetime(2000, 1, 1)))


def test_deliveries_and_redeliver_of_a_verified_webhook(client, partner, sink) -> None:
    task = client.submit("t", callback_url=sink.url)
    client.complete(task.id, "succeeded", result={"ok": True})
    until(lambda: client.get(task.id).delivery.status == "delivered", what="delivered")
    (attempt,) = client.deliveries(task.id)
    assert (attempt.number, attempt.status_code, attempt.outcome) == (1, 204, "delivered")
    again = client.redeliver(task.id)
    assert again.delivery is not None and again.delivery.status == "pending"
    with pytest.raises(Conflict) as pending:
        client.redeliver(task.id)
    assert pending.value.code == "delivery_pending" and pending.value.task is not None
    until(lambda: len(sink.received) == 2, what="the redelivery")
    events = [verify(h, b, secrets=[partner["signingSecret"]]) for h, b in sink.received]
    assert events[0].id == events[1].id == attempt.event_id
    assert events[0].task is not None and events[0].task.result == {"ok": True}


def test_a_submitters_trace_context_reaches_every_attempt(client, partner, sink) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    task = client.submit(
        "t",
        callback_url=sink.url,
        traceparent=f"00-{trace_id}-00f067aa0ba902b7-01",
        tracestate="congo=t61rcWkgMzE",
    )
    client.complete(task.id, "succeeded")
    until(lambda: client.get(task.id).delivery.status == "delivered", what="delivered")
    client.redeliver(task.id)
    until(lambda: len(sink.received) == 2, what="the redelivery")
    traces = [verify(h, b, secrets=[partner["signingSecret"]]).trace for h, b in sink.received]
    assert all(t is not None and t.trace_id == trace_id for t in traces)
    assert all(t is not None and t.state == "congo=t61rcWkgMzE" for t in traces)
    assert len({t.span_id for t in traces if t is not None}) == 2


def test_cancel_and_its_conflict(client) -> None:
    task = client.submit("t", callback_url=HOOK)
    assert client.cancel(task.id).status == "cancelled"
    with pytest.raises(Conflict) as conflict:
        client.cancel(task.id)
    assert conflict.value.code == "invalid_transition"
    assert conflict.value.task is not None and conflict.value.task.status == "cancelled"


def test_test_event_is_a_signed_ping(client, partner, sink) -> None:
    sent = client.test_event(sink.url)
    assert sent.status == "pending" and sent.event_id.startswith("evt_")
    until(lambda: client.get_test_event(sent.event_id).status == "delivered", what="delivered")
    (attempt,) = client.get_test_event(sent.event_id).attempts
    assert attempt.status_code == 204
    ((headers, body),) = sink.received
    event = verify(headers, body, secrets=partner["signingSecret"])
    assert (event.id, event.type, event.data, event.task) == (sent.event_id, "ping", {}, None)


def test_public_keys_of_a_v1a_tenant(hookrelay_serve) -> None:
    tenant = hookrelay_serve.tenant("v1a")
    with Client(hookrelay_serve.url, tenant["apiKey"]) as c:
        assert c.public_keys() == [tenant["publicKey"]]


def test_portal_link_opens_once(hookrelay_serve, partner) -> None:
    with Client(hookrelay_serve.url, partner["apiKey"]) as c:
        link = c.portal_link()
        viewer = c.portal_link(read_only=True)
    assert link.url.startswith(f"{hookrelay_serve.url}/portal/open?token=hrp_")
    assert link.expires_at > datetime.now(UTC) and "hrp_" not in repr(link)
    with httpx.Client() as browser:
        assert browser.get(link.url).status_code == 303
        assert browser.get(link.url).status_code == 410
        opened = browser.get(viewer.url, follow_redirects=True)
        assert opened.status_code == 200 and "read-only" in opened.text


def test_errors_as_the_server_answers_them(client, hookrelay_serve, partner) -> None:
    with pytest.raises(NotFound) as missing:
        client.get("task_nope")
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    with pytest.raises(InvalidRequest) as invalid:
        client.submit("t", callback_url="ftp://example.com/hook")
    assert invalid.value.field == "callbackUrl" and invalid.value.status == 422
    with pytest.raises(InvalidRequest) as invalid:
        client.progress(client.submit("t", callback_url=HOOK).id, 101)
    assert invalid.value.field == "percent"
    with Client(hookrelay_serve.url, "hrk_wrong") as stranger, pytest.raises(Unauthorized):
        stranger.get("task_x")
    # A tenant key where the admin token belongs.
    with Client(hookrelay_serve.url, admin_token=partner["apiKey"]) as wrong:
        pytest.raises(Forbidden, wrong.start, "task_x")
    with Client(hookrelay_serve.url) as nobody, pytest.raises(ValueError, match="api_key"):
        nobody.get("task_x")
    assert "hrk_" not in repr(client) and ADMIN_TOKEN not in repr(client)


def test_a_stream_past_the_cap_is_rate_limited(hookrelay_serve) -> None:
    tenant = hookrelay_serve.tenant()
    cap = int(hookrelay_serve.env["HOOKRELAY_STREAMS_PER_TENANT"])
    clock = FakeClock()
    with httpx.Client(base_url=hookrelay_serve.url, timeout=30) as raw:
        streams = [raw.stream("GET", "/v1/events", headers=bearer(tenant["apiKey"]))]
        streams += [
            raw.stream("GET", "/v1/events", headers=bearer(tenant["apiKey"]))
            for _ in range(cap - 1)
        ]
        opened = [s.__enter__() for s in streams]
        try:
            c = Client(hookrelay_serve.url, tenant["apiKey"], clock=clock)
            with c, pytest.raises(RateLimited) as limited:
                next(iter(c.follow_all(give_up_after=5)))
        finally:
            for s, r in zip(streams, opened, strict=True):
                s.__exit__(None, None, None)
                assert r.status_code == 200
    assert limited.value.retry_after == 10 and limited.value.code == "too_many_streams"
    assert clock.slept[0] == 10  # each reconnection waited as Retry-After asked
