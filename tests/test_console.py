"""The ops console through its HTTP surface: sign-in, CSRF, headers, filters, bulk
replay with preview and audit, circuits, tenants, search, and inert hostile text.
(The same flows in a real browser: tests/test_console_browser.py.)"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.ops.audit import preview_replay
from hookrelay.outbox.ops.dead_letters import list_dead_letters
from hookrelay.outbox.store.console import MinuteCount
from hookrelay.outbox.store.deadletters import DeadLetterFilter
from hookrelay.outbox.tenants import create_tenant
from hookrelay.service.console.security import HEADERS, MAX_FORM_BYTES, SignInThrottle
from hookrelay.service.console.views import age, chart
from tests.receiver import failing_until_healthy
from tests.support import ADMIN_TOKEN, bearer, dead_letters_of_two_tenants, dispatcher, wait_drained

pytestmark = pytest.mark.anyio
ORIGIN = {"Origin": "http://hookrelay.test"}
HOSTILE = "<script>alert(1)</script>\x1b]0;PWNED\x07\x1b[2J"


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF token in the page"
    return found.group(1)


async def signed_in(client: httpx.AsyncClient) -> str:
    """Sign in; the CSRF token for the forms that follow."""
    token = csrf_of((await client.get("/ops/sign-in")).text)
    r = await client.post(
        "/ops/sign-in", data={"csrf": token, "token": ADMIN_TOKEN}, headers=ORIGIN
    )
    assert r.status_code == 303 and r.headers["location"] == "/ops/overview"
    return csrf_of((await client.get("/ops/overview")).text)


@pytest.fixture
async def receiver():
    rx = await failing_until_healthy(500, HOSTILE).start()
    yield rx
    await rx.stop()


@pytest.fixture
async def dead(pool, runtime, receiver):
    """Three dead events of tenant A (HTTP 500 with hostile text), two of tenant B."""
    return await dead_letters_of_two_tenants(pool, runtime, receiver.url)


async def test_pages_need_sign_in_and_carry_strict_headers(client) -> None:
    for path in ("/ops/overview", "/ops/dead-letters", "/ops/tenants", "/ops/audit"):
        r = await client.get(path)
        assert r.status_code == 303 and r.headers["location"] == "/ops/sign-in", path
    r = await client.get("/ops/sign-in")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    for name, value in HEADERS.items():
        assert r.headers[name] == value
    assert "'unsafe-inline'" not in r.headers["content-security-policy"]
    assert "<script>" not in r.text  # the one script is an external file of ours
    css = await client.get("/ops/static/ops.css")
    assert css.status_code == 200 and "@import" not in css.text and "url(http" not in css.text


async def test_sign_in_cookie_csrf_and_sign_out(client) -> None:
    token = csrf_of((await client.get("/ops/sign-in")).text)
    wrong = await client.post("/ops/sign-in", data={"csrf": token, "token": "x"}, headers=ORIGIN)
    assert wrong.status_code == 401 and "not the admin token" in wrong.text
    forged = await client.post(
        "/ops/sign-in",
        data={"csrf": token, "token": ADMIN_TOKEN},
        headers={"Origin": "http://evil.example"},
    )
    assert forged.status_code == 400
    stale = await client.post(
        "/ops/sign-in", data={"csrf": "nope", "token": ADMIN_TOKEN}, headers=ORIGIN
    )
    assert stale.status_code == 400
    r = await client.post(
        "/ops/sign-in", data={"csrf": token, "token": ADMIN_TOKEN}, headers=ORIGIN
    )
    assert r.status_code == 303
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ops" in cookie
    page = await client.get("/ops/overview")
    assert page.status_code == 200 and "events in the outbox" in page.text
    assert "<svg" in page.text and 'data-refresh="10"' in page.text
    out = await client.post("/ops/sign-out", data={"csrf": csrf_of(page.text)}, headers=ORIGIN)
    assert out.status_code == 303
    assert (await client.get("/ops/overview")).status_code == 303


async def test_failed_sign_ins_slow_down() -> None:
    throttle = SignInThrottle(base_s=0.0001, cap_s=0.0008)
    delays = []
    for _ in range(6):
        await throttle.failed("10.0.0.1")
        delays.append(throttle.delay_s("10.0.0.1"))
    assert delays == sorted(delays) and delays[0] < delays[3] and delays[-1] == 0.0008
    assert throttle.delay_s("10.0.0.2") == 0.0
    throttle.succeeded("10.0.0.1")
    assert throttle.delay_s("10.0.0.1") == 0.0


async def test_filter_preview_bulk_replay_audit(client, pool, runtime, dead, receiver) -> None:
    csrf = await signed_in(client)
    a, a_events = dead["a"]
    listing = await client.get("/ops/dead-letters", params={"tenant": a.id})
    assert all(e in listing.text for e in a_events)
    assert not any(e in listing.text for e in dead["b"][1])
    by_class = await client.get("/ops/dead-letters", params={"errorClass": "http_5xx"})
    assert by_class.text.count('name="eventId"') == 5
    none = await client.get("/ops/dead-letters", params={"status": "404"})
    assert 'name="eventId"' not in none.text
    bad = await client.get("/ops/dead-letters", params={"errorClass": "nope"})
    assert bad.status_code == 400

    form = {"csrf": csrf, "tenant": a.id, "reason": "partner fixed it (INC-7)"}
    preview = await client.post("/ops/dead-letters/preview", data=form, headers=ORIGIN)
    assert preview.status_code == 200 and 'Would replay <b id="preview-count">3</b>' in preview.text
    assert await pool.fetchval("SELECT count(*) FROM dead_letters WHERE replayed_at IS NULL") == 5
    unconfirmed = await client.post("/ops/dead-letters/bulk-replay", data=form, headers=ORIGIN)
    assert unconfirmed.status_code == 400
    no_reason = {**form, "reason": "", "confirm": "yes"}
    r = await client.post("/ops/dead-letters/bulk-replay", data=no_reason, headers=ORIGIN)
    assert r.status_code == 400
    no_csrf = {**form, "csrf": "", "confirm": "yes"}
    r = await client.post("/ops/dead-letters/bulk-replay", data=no_csrf, headers=ORIGIN)
    assert r.status_code == 400
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0  # nothing replayed yet

    receiver.state["healthy"]["ok"] = True
    r = await client.post(
        "/ops/dead-letters/bulk-replay", data={**form, "confirm": "yes"}, headers=ORIGIN
    )
    assert r.status_code == 303 and "Replayed+3" in r.headers["location"]
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
    delivered = await pool.fetch(
        "SELECT DISTINCT event_id FROM delivery_attempts WHERE outcome = 'delivered'"
    )
    assert {r["event_id"] for r in delivered} == set(a_events)
    row = await pool.fetchrow("SELECT * FROM ops_audit")
    assert (row["action"], row["count"], row["reason"]) == ("bulk_replay", 3, form["reason"])
    assert a.id in row["filter"]
    audit = await client.get("/ops/audit")
    assert "INC-7" in audit.text and "bulk_replay" in audit.text


async def test_replay_selected_is_audited(client, pool, dead, receiver) -> None:
    csrf = await signed_in(client)
    picked = dead["b"][1]
    r = await client.post(
        "/ops/dead-letters/replay",
        data={"csrf": csrf, "eventId": picked, "reason": "retry b"},
        headers=ORIGIN,
    )
    assert r.status_code == 303
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 2
    row = await pool.fetchrow("SELECT action, count, reason FROM ops_audit")
    assert tuple(row) == ("replay", 2, "retry b")


async def test_event_page_shows_hostile_text_inert(client, dead) -> None:
    await signed_in(client)
    event_id = dead["a"][1][0]
    r = await client.get(f"/ops/events/{event_id}")
    assert r.status_code == 200
    assert "<script>alert(1)</script>" not in r.text and "\x1b" not in r.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b]0;PWNED\\x07" in r.text
    assert r.text.count('class="n">#') == 3  # the attempt timeline
    assert "&#34;type&#34;: &#34;task.succeeded&#34;" in r.text  # the stored body, pretty
    task_id = re.search(r'href="/ops/tasks/(task_\w+)"', r.text)
    assert task_id
    t = await client.get(f"/ops/tasks/{task_id.group(1)}")
    assert t.status_code == 200 and event_id in t.text
    assert (await client.get("/ops/events/evt_nope")).status_code == 404
    assert (await client.get("/ops/tasks/task_nope")).status_code == 404


async def test_close_circuit_is_audited(client, pool) -> None:
    csrf = await signed_in(client)
    host = "http://203.0.113.9:80"
    await pool.execute(
        "INSERT INTO destinations (host, state, consecutive_failures, last_error, opened_at,"
        " probe_at) VALUES ($1, 'open', 12, $2, now(), now() + interval '30 s')",
        host,
        HOSTILE,
    )
    page = await client.get("/ops/destinations")
    assert "Close circuit now" in page.text and "<script>alert" not in page.text
    r = await client.post(
        "/ops/destinations/close", data={"csrf": csrf, "host": host}, headers=ORIGIN
    )
    assert r.status_code == 400  # a reason is required
    r = await client.post(
        "/ops/destinations/close",
        data={"csrf": csrf, "host": host, "reason": "receiver back"},
        headers=ORIGIN,
    )
    assert r.status_code == 303
    state = await pool.fetchrow("SELECT state, consecutive_failures FROM destinations")
    assert tuple(state) == ("closed", 0)
    row = await pool.fetchrow("SELECT action, filter, reason FROM ops_audit")
    assert row["action"] == "close_circuit" and host in row["filter"]


async def test_tenants_create_and_rotate_key_show_once(client) -> None:
    csrf = await signed_in(client)
    r = await client.post(
        "/ops/tenants", data={"csrf": csrf, "name": "<b>acme</b>"}, headers=ORIGIN
    )
    assert r.status_code == 200 and "Shown once" in r.text and "&lt;b&gt;acme" in r.text
    key = re.search(r"<code>(hr_[^<]+)</code>", r.text)
    tenant_id = re.search(r"<code>(ten_\w+)</code>", r.text)
    assert key and tenant_id
    assert (await client.get("/v1/tasks", headers=bearer(key.group(1)))).status_code == 200
    listing = await client.get("/ops/tenants")
    assert tenant_id.group(1) in listing.text and key.group(1) not in listing.text
    r = await client.post(
        f"/ops/tenants/{tenant_id.group(1)}/rotate-key", data={"csrf": csrf}, headers=ORIGIN
    )
    new_key = re.search(r"<code>(hr_[^<]+)</code>", r.text)
    assert new_key and new_key.group(1) != key.group(1)
    assert (await client.get("/v1/tasks", headers=bearer(key.group(1)))).status_code == 401
    r = await client.post(
        f"/ops/tenants/{tenant_id.group(1)}/rotate-secret", data={"csrf": csrf}, headers=ORIGIN
    )
    assert r.status_code == 200 and "whsec_" in r.text


async def test_search_goes_to_the_page(client) -> None:
    await signed_in(client)
    for q, where in (
        ("task_abc", "/ops/tasks/task_abc"),
        ("evt_abc", "/ops/events/evt_abc"),
        ("ten_abc", "/ops/dead-letters?tenant=ten_abc"),
    ):
        r = await client.get("/ops/search", params={"q": q})
        assert r.status_code == 303 and r.headers["location"] == where
    assert (await client.get("/ops/search", params={"q": "what"})).status_code == 404


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (503, "HTTP 503", "http_5xx"),
        (404, "HTTP 404", "http_4xx"),
        (None, "timed out after 10s", "timeout"),
        (None, "ClientConnectorDNSError: Cannot connect to host x:443 ssl:default [DNS]", "dns"),
        (None, "ClientConnectorCertificateError: certificate verify failed", "tls"),
        (None, "ClientConnectorError: Cannot connect to host 127.0.0.1:1", "connect"),
        (None, "destination refused: 10.0.0.1 is private", "blocked"),
        (None, "something else", "other"),
    ],
)
async def test_error_classes_filter_and_show_alike(pool, runtime, status, error, expected) -> None:
    async with pool.acquire() as conn:
        t = await create_tenant(conn, "c", runtime.secret_box)
    await pool.execute(
        "INSERT INTO dead_letters (event_id, tenant_id, task_id, event_type, callback_url, host,"
        " body, created_at, attempts, last_error, last_status_code)"
        " VALUES ('evt_x', $1, 'task_x', 'task.failed', 'http://h/', 'http://h:80', '{}', now(),"
        " 1, $2, $3)",
        t.id,
        error,
        status,
    )
    async with pool.acquire() as conn:
        assert await preview_replay(conn, DeadLetterFilter(error_class=expected)) == 1
        [letter], _ = await list_dead_letters(conn, DeadLetterFilter(), limit=10)
    assert letter.error_class == expected


async def test_dead_letter_filter_refuses_a_status_that_is_not_three_digits(client) -> None:
    await signed_in(client)
    for status in ("abc", "5000", "²00"):
        r = await client.get("/ops/dead-letters", params={"status": status})
        assert r.status_code == 400 and "three-digit HTTP status code" in r.text, status


async def test_replay_selected_refuses_an_empty_selection(client, pool, dead) -> None:
    csrf = await signed_in(client)
    r = await client.post(
        "/ops/dead-letters/replay", data={"csrf": csrf, "reason": "none picked"}, headers=ORIGIN
    )
    assert r.status_code == 400 and "select between 1 and 1,000" in r.text
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0


async def test_replay_one_event_from_its_page_then_already_replayed(client, pool, dead) -> None:
    csrf = await signed_in(client)
    event_id = dead["a"][1][0]
    form = {"csrf": csrf, "reason": "one more try"}
    r = await client.post(f"/ops/events/{event_id}/replay", data=form, headers=ORIGIN)
    assert r.status_code == 303
    assert r.headers["location"] == f"/ops/events/{event_id}?notice=Replayed."
    assert await pool.fetchval("SELECT count(*) FROM outbox WHERE event_id = $1", event_id) == 1
    again = await client.post(f"/ops/events/{event_id}/replay", data=form, headers=ORIGIN)
    assert again.headers["location"].endswith("notice=Already+replayed.")
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 1


async def test_event_page_shows_a_body_that_is_not_json_as_stored(client, pool, runtime) -> None:
    await signed_in(client)
    async with pool.acquire() as conn:
        t = await create_tenant(conn, "c", runtime.secret_box)
    await pool.execute(
        "INSERT INTO dead_letters (event_id, tenant_id, task_id, event_type, callback_url, host,"
        " body, created_at, attempts, last_error, last_status_code)"
        " VALUES ('evt_raw', $1, 'task_raw', 'task.failed', 'http://h/', 'http://h:80',"
        " 'not {json', now(), 1, 'HTTP 500', 500)",
        t.id,
    )
    r = await client.get("/ops/events/evt_raw")
    assert r.status_code == 200 and "not {json" in r.text


async def test_redeliver_task_from_the_console(client, pool, dead) -> None:
    csrf = await signed_in(client)
    missing = await client.post(
        "/ops/tasks/task_nope/redeliver", data={"csrf": csrf}, headers=ORIGIN
    )
    assert missing.status_code == 303
    assert missing.headers["location"].startswith("/ops/tasks/task_nope?notice=Not+redelivered")
    task_id = await pool.fetchval(
        "SELECT task_id FROM dead_letters WHERE event_id = $1", dead["a"][1][0]
    )
    r = await client.post(f"/ops/tasks/{task_id}/redeliver", data={"csrf": csrf}, headers=ORIGIN)
    assert r.status_code == 303
    assert r.headers["location"] == f"/ops/tasks/{task_id}?notice=Queued+for+redelivery."
    again = await client.post(
        f"/ops/tasks/{task_id}/redeliver", data={"csrf": csrf}, headers=ORIGIN
    )
    assert "Not+redelivered" in again.headers["location"]


async def test_new_tenant_needs_a_name(client, pool) -> None:
    csrf = await signed_in(client)
    for name in ("", "   ", "x" * 201):
        r = await client.post("/ops/tenants", data={"csrf": csrf, "name": name}, headers=ORIGIN)
        assert r.status_code == 400 and "a name of 1-200 characters" in r.text
    assert await pool.fetchval("SELECT count(*) FROM tenants") == 0


async def test_rotate_secret_of_an_ed25519_tenant_shows_the_new_public_key(
    client, pool, runtime
) -> None:
    csrf = await signed_in(client)
    async with pool.acquire() as conn:
        t = await create_tenant(conn, "ed", runtime.secret_box, scheme="v1a")
    r = await client.post(f"/ops/tenants/{t.id}/rotate-secret", data={"csrf": csrf}, headers=ORIGIN)
    assert r.status_code == 200 and "new public key" in r.text
    assert "new signing secret" not in r.text and "whsec_" not in r.text


async def test_forms_that_are_too_large_not_utf8_or_hold_a_nul_are_refused(client) -> None:
    csrf = await signed_in(client)
    form_type = {**ORIGIN, "Content-Type": "application/x-www-form-urlencoded"}
    cases = {
        "form too large": f"csrf={csrf}&name=" + "x" * (MAX_FORM_BYTES + 1),
        "form is not UTF-8": f"csrf={csrf}&name=%FF%FE".encode() + b"\xff",
        "form holds a NUL character": f"csrf={csrf}&name=a%00b",
    }
    for message, body in cases.items():
        r = await client.post("/ops/tenants", content=body, headers=form_type)
        assert r.status_code == 400 and message in r.text, message


async def test_a_post_without_origin_needs_a_referer_from_this_console(client, pool) -> None:
    csrf = await signed_in(client)
    form = {"csrf": csrf, "name": "acme"}
    for referer in (None, "http://evil.example/ops/tenants", "http://hookrelay.test.evil/"):
        headers = {"Referer": referer} if referer else {}
        r = await client.post("/ops/tenants", data=form, headers=headers)
        assert r.status_code == 400 and "without an Origin from this console" in r.text
    assert await pool.fetchval("SELECT count(*) FROM tenants") == 0
    ok = await client.post(
        "/ops/tenants", data=form, headers={"Referer": "http://hookrelay.test/ops/tenants"}
    )
    assert ok.status_code == 200 and "Shown once" in ok.text


async def test_sign_in_throttle_forgets_the_oldest_address_beyond_ten_thousand() -> None:
    throttle = SignInThrottle(base_s=0.0, cap_s=0.0)
    for i in range(10_001):
        await throttle.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(throttle._failures) == 10_000
    assert "10.0.0.0" not in throttle._failures and "10.0.39.16" in throttle._failures


def test_age_reads_seconds_minutes_and_hours() -> None:
    assert age(None) == "none due"
    assert age(timedelta(seconds=59)) == "59 s"
    assert age(timedelta(seconds=61)) == "1 min 1 s"
    assert age(timedelta(hours=2, minutes=5, seconds=9)) == "2 h 5 min"


def test_chart_leaves_out_minutes_outside_its_window() -> None:
    now = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    inside = MinuteCount(now.replace(second=0), "delivered", 4)
    stale = MinuteCount(now - timedelta(hours=2), "dead", 1000)
    future = MinuteCount(now + timedelta(minutes=5), "retry", 1000)
    svg = chart([inside, stale, future], now=now)
    assert 'peak 4"' in svg and "#c53030" not in svg and "#b7791f" not in svg
