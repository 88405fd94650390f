"""The partner portal through its HTTP surface: portal links (single use, expiry, key
rotation, tenant deletion, read-only), the session cookie, CSRF on every form, one
tenant's view only, the audit of what a partner does there, and inert hostile text.
(The same flows in a real browser: tests/test_portal_browser.py.)"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from starlette.routing import Mount, Route

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.service.console.security import HEADERS
from hookrelay.service.portal import session as portal_session
from tests import test_console
from tests.support import ADMIN, bearer, dispatcher, wait_drained
from tests.test_console import HOSTILE, ORIGIN, csrf_of
from tests.test_console import signed_in as ops_signed_in

pytestmark = pytest.mark.anyio


async def link(client: httpx.AsyncClient, api_key: str, **body: Any) -> dict[str, Any]:
    r = await client.post("/v1/portal-links", json=body or None, headers=bearer(api_key))
    assert r.status_code == 201, r.text
    assert r.headers["cache-control"] == "no-store"
    return dict(r.json())


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


async def opened(client: httpx.AsyncClient, api_key: str, **body: Any) -> str:
    """Open a fresh link in ``client``; the CSRF token of the session's forms."""
    r = await client.get(path_of((await link(client, api_key, **body))["url"]))
    assert r.status_code == 303 and r.headers["location"] == "/portal/overview", r.text
    return csrf_of((await client.get("/portal/overview")).text)


# The console's fixtures: a receiver answering 500 with hostile text until told it is
# healthy, and three dead webhooks of tenant "a" sent to it, two of tenant "b".
receiver, dead = test_console.receiver, test_console.dead


async def test_links_from_the_tenant_and_from_ops(client, tenant, pool) -> None:
    own = await link(client, tenant["apiKey"])
    url = urlsplit(own["url"])
    assert (url.scheme, url.netloc, url.path) == ("http", "hookrelay.test", "/portal/open")
    token = parse_qs(url.query)["token"][0]
    assert token.startswith("hrp_") and own["expiresAt"].endswith("Z")
    row = await pool.fetchrow("SELECT * FROM portal_links")
    assert row["tenant_id"] == tenant["id"] and row["created_by"] == f"tenant:{tenant['id']}"
    assert token.encode() not in row["token_hash"] and len(row["token_hash"]) == 32
    assert row["read_only"] is False
    left = await pool.fetchval("SELECT expires_at - created_at FROM portal_links")
    assert left.total_seconds() == 900

    r = await client.post(
        f"/v1/admin/tenants/{tenant['id']}/portal-links", json={"readOnly": True}, headers=ADMIN
    )
    assert r.status_code == 201
    assert await pool.fetchval("SELECT read_only FROM portal_links WHERE created_by = 'admin'")
    missing = await client.post("/v1/admin/tenants/ten_nope/portal-links", headers=ADMIN)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert (await client.post("/v1/portal-links", headers=ADMIN)).status_code == 403
    assert (await client.post("/v1/portal-links")).status_code == 401
    tenant_for_other = await client.post(
        f"/v1/admin/tenants/{tenant['id']}/portal-links", headers=bearer(tenant["apiKey"])
    )
    assert tenant_for_other.status_code == 403
    bad = await client.post(
        "/v1/portal-links", json={"readOnly": "yes"}, headers=bearer(tenant["apiKey"])
    )
    assert bad.status_code in (400, 422) and "readOnly" in bad.text


async def test_a_link_opens_once_and_sets_a_strict_cookie(client, tenant) -> None:
    url = path_of((await link(client, tenant["apiKey"]))["url"])
    first = await client.get(url)
    assert first.status_code == 303 and first.headers["location"] == "/portal/overview"
    cookie = first.headers["set-cookie"].lower()
    assert cookie.startswith("hookrelay_portal=")
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/portal" in cookie
    assert "max-age=43200" in cookie and "secure" not in cookie  # plain http here
    page = await client.get("/portal/overview")
    assert page.status_code == 200 and "Your webhooks" in page.text and tenant["id"] in page.text
    for name, value in HEADERS.items():
        assert page.headers[name] == value
    assert "<script>" not in page.text  # scripts are files of ours, none inline

    again = await client.get(url)
    assert again.status_code == 410 and "cannot be opened" in again.text
    client.cookies.clear()
    assert (await client.get(url)).status_code == 410  # another browser: refused too
    assert (await client.get("/portal/open?token=hrp_made_up")).status_code == 410
    assert (await client.get("/portal/open")).status_code == 410
    assert (await client.get("/portal/overview")).status_code == 401
    entry = await client.get("/portal")
    assert entry.status_code == 308 and entry.headers["location"] == "/portal/"


async def test_an_expired_link_is_refused(client, tenant, pool) -> None:
    url = path_of((await link(client, tenant["apiKey"]))["url"])
    await pool.execute("UPDATE portal_links SET expires_at = now() - interval '1 second'")
    assert (await client.get(url)).status_code == 410
    assert (await client.get("/portal/overview")).status_code == 401


async def test_the_cookie_is_secure_over_https(runtime, pool, tenant) -> None:
    from hookrelay.service.server.app import create_app

    app = create_app(runtime, pool=pool)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://hookrelay.test") as c:
            made = await link(c, tenant["apiKey"])
            assert made["url"].startswith("https://hookrelay.test/portal/open?token=")
            r = await c.get(path_of(made["url"]))
            assert r.status_code == 303 and "; secure" in r.headers["set-cookie"].lower()


async def test_key_rotation_and_deletion_end_every_session(client, tenant, pool) -> None:
    await opened(client, tenant["apiKey"])
    other = httpx.AsyncClient(transport=client._transport, base_url="http://hookrelay.test")
    async with other:
        await opened(other, tenant["apiKey"])
        unopened = path_of((await link(client, tenant["apiKey"]))["url"])
        r = await client.post(f"/v1/admin/tenants/{tenant['id']}/rotate-key", headers=ADMIN)
        assert r.status_code == 200
        for browser in (client, other):
            ended = await browser.get("/portal/tasks")
            assert ended.status_code == 401 and "Ask for a new portal link" in ended.text
        assert (await client.get(unopened)).status_code == 410  # made under the old key

        await opened(other, r.json()["apiKey"])
        assert (await other.get("/portal/overview")).status_code == 200
        await pool.execute("DELETE FROM tenants WHERE id = $1", tenant["id"])
        assert (await other.get("/portal/overview")).status_code == 401
        assert await pool.fetchval("SELECT count(*) FROM portal_links") == 0


async def test_a_session_ends_after_its_lifetime(client, tenant, monkeypatch) -> None:
    await opened(client, tenant["apiKey"])
    assert (await client.get("/portal/overview")).status_code == 200
    monkeypatch.setattr(portal_session, "SESSION_MAX_S", 0)
    assert (await client.get("/portal/overview")).status_code == 401


async def test_only_the_sessions_tenant_is_seen(client, dead) -> None:
    (a, a_events), (b, b_events) = dead["a"], dead["b"]
    await opened(client, a.api_key)
    letters = await client.get("/portal/dead-letters")
    assert all(e in letters.text for e in a_events)
    assert not any(e in letters.text for e in b_events)
    tasks = await client.get("/portal/tasks")
    a_tasks = set(re.findall(r'data-task="(task_\w+)"', tasks.text))
    assert len(a_tasks) == 3
    own = await client.get(f"/portal/dead-letters/{a_events[0]}")
    assert own.status_code == 200 and own.text.count('class="n">#') == 3

    b_task = (await client.get("/v1/tasks", headers=bearer(b.api_key))).json()["data"][0]["id"]
    for path in (
        f"/portal/dead-letters/{b_events[0]}",
        f"/portal/tasks/{b_task}",
        "/portal/tasks/task_nope",
        "/portal/dead-letters/evt_nope",
        "/portal/test-events/evt_nope",
    ):
        r = await client.get(path)
        assert r.status_code == 404, path
        assert b.id not in r.text and "<html" in r.text  # a page, never JSON
    csrf = csrf_of(letters.text)
    for path in (f"/portal/dead-letters/{b_events[0]}/replay", f"/portal/tasks/{b_task}/redeliver"):
        r = await client.post(path, data={"csrf": csrf}, headers=ORIGIN)
        assert r.status_code == 404, path
    # A bulk replay is of the session's tenant whatever the form says.
    form = {"csrf": csrf, "tenant": b.id, "confirm": "yes"}
    r = await client.post("/portal/dead-letters/replay", data=form, headers=ORIGIN)
    assert r.status_code == 303 and "Replayed+3" in r.headers["location"]


async def test_filters_and_paging_of_the_task_list(client, dead) -> None:
    a, _ = dead["a"]
    await opened(client, a.api_key)
    for params, count in (
        ({}, 3),
        ({"status": "succeeded"}, 3),
        ({"status": "failed"}, 0),
        ({"delivery": "dead"}, 3),
        ({"delivery": "delivered"}, 0),
        ({"type": "t"}, 3),
        ({"type": "other"}, 0),
        ({"since": "2000-01-01T00:00:00Z"}, 3),
        ({"until": "2000-01-01T00:00:00Z"}, 0),
    ):
        r = await client.get("/portal/tasks", params=params)
        assert r.status_code == 200, r.text
        assert r.text.count("data-task=") == count, params
    for params in ({"status": "nope"}, {"delivery": "nope"}, {"since": "yesterday"}):
        assert (await client.get("/portal/tasks", params=params)).status_code == 400
    assert (await client.get("/portal/tasks", params={"cursor": "bad"})).status_code == 400


async def test_task_list_pages_by_keyset(client, tenant, pool, runtime) -> None:
    from hookrelay.outbox.portal import TaskFilter, task_page
    from hookrelay.outbox.tasks import NewTask, create_task

    async with pool.acquire() as conn:
        made = [
            (await create_task(conn, tenant["id"], NewTask(type="t", callback_url="http://x/")))[
                0
            ].id
            for _ in range(5)
        ]
        seen, before = [], None
        while True:
            page, before = await task_page(conn, tenant["id"], TaskFilter(), before=before, limit=2)
            seen += [t.id for t in page]
            if before is None:
                break
    assert sorted(seen) == sorted(made) and len(seen) == 5
    await opened(client, tenant["apiKey"])
    r = await client.get("/portal/tasks")
    assert r.text.count("data-task=") == 5 and "Older" not in r.text


async def test_replay_one_and_a_range_with_its_count_first(client, dead, pool, runtime) -> None:
    a, a_events = dead["a"]
    csrf = await opened(client, a.api_key)
    r = await client.post(
        f"/portal/dead-letters/{a_events[0]}/replay",
        data={"csrf": csrf, "reason": "fixed"},
        headers=ORIGIN,
    )
    assert r.status_code == 303
    form = {"csrf": csrf, "eventType": "task.succeeded"}
    preview = await client.post("/portal/dead-letters/preview", data=form, headers=ORIGIN)
    assert preview.status_code == 200
    shown = re.search(r'id="preview-count">(\d+)<', preview.text)
    assert shown and int(shown.group(1)) == 2
    unconfirmed = await client.post("/portal/dead-letters/replay", data=form, headers=ORIGIN)
    assert unconfirmed.status_code == 400
    done = await client.post(
        "/portal/dead-letters/replay", data={**form, "confirm": "yes"}, headers=ORIGIN
    )
    assert done.status_code == 303 and "Replayed+2" in done.headers["location"]
    rows = await pool.fetch("SELECT actor, action, count, reason FROM ops_audit ORDER BY id")
    actor = f"portal:{a.id}"
    assert [tuple(r) for r in rows] == [
        (actor, "replay", 1, "fixed"),
        (actor, "bulk_replay", 2, "(no reason given)"),
    ]
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 3
    assert (
        await pool.fetchval("SELECT count(*) FROM dead_letters WHERE replayed_by = $1", actor) == 3
    )
    ops = httpx.AsyncClient(transport=client._transport, base_url="http://hookrelay.test")
    async with ops:
        await ops_signed_in(ops)
        audit = await ops.get("/ops/audit")
    assert audit.text.count(actor) == 2


async def test_read_only_sessions_see_no_form_and_change_nothing(client, dead, pool) -> None:
    a, a_events = dead["a"]
    csrf = await opened(client, a.api_key, readOnly=True)
    task_id = re.findall(r'data-task="(task_\w+)"', (await client.get("/portal/tasks")).text)[0]
    for path in (
        "/portal/dead-letters",
        f"/portal/dead-letters/{a_events[0]}",
        f"/portal/tasks/{task_id}",
        "/portal/notifications",
        "/portal/signing-keys",
    ):
        page = await client.get(path)
        assert page.status_code == 200 and "read-only" in page.text, path
        forms = re.findall(r'<form[^>]*method="post"[^>]*action="([^"]+)"', page.text)
        assert forms == ["/portal/sign-out"], (path, forms)
    for path, extra in (
        (f"/portal/dead-letters/{a_events[0]}/replay", {}),
        ("/portal/dead-letters/preview", {}),
        ("/portal/dead-letters/replay", {"confirm": "yes"}),
        (f"/portal/tasks/{task_id}/redeliver", {}),
        ("/portal/notifications", {"url": "http://127.0.0.1:9/n", "events": "delivery.dead"}),
        ("/portal/signing-keys/rotate", {}),
        ("/portal/test-events", {"url": "http://127.0.0.1:9/t"}),
    ):
        r = await client.post(path, data={"csrf": csrf, **extra}, headers=ORIGIN)
        assert r.status_code == 403 and "read-only" in r.text, path
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0
    assert await pool.fetchval("SELECT count(*) FROM ops_audit") == 0


def _portal_posts(client: httpx.AsyncClient) -> list[str]:
    app = client._transport.app  # type: ignore[attr-defined]
    (mount,) = [r for r in app.routes if isinstance(r, Mount) and r.path == "/portal"]
    return [
        "/portal" + r.path
        for r in mount.routes
        if isinstance(r, Route) and r.methods and "POST" in r.methods
    ]


async def test_every_form_needs_the_csrf_token_and_this_origin(client, dead, pool) -> None:
    a, a_events = dead["a"]
    csrf = await opened(client, a.api_key)
    task_id = re.findall(r'data-task="(task_\w+)"', (await client.get("/portal/tasks")).text)[0]
    posts = _portal_posts(client)
    assert len(posts) == 10
    for template in posts:
        path = template.replace("{task_id}", task_id).replace("{event_id}", a_events[0])
        data = {"confirm": "yes", "url": "http://127.0.0.1:9/x", "events": "delivery.dead"}
        missing = await client.post(path, data=data, headers=ORIGIN)
        assert missing.status_code == 400 and "expired" in missing.text, path
        wrong = await client.post(path, data={**data, "csrf": "nope"}, headers=ORIGIN)
        assert wrong.status_code == 400, path
        foreign = await client.post(
            path, data={**data, "csrf": csrf}, headers={"Origin": "http://evil.example"}
        )
        assert foreign.status_code == 400 and "cross-origin" in foreign.text, path
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0
    assert await pool.fetchval("SELECT count(*) FROM ops_audit") == 0
    assert (await client.get("/portal/overview")).status_code == 200  # still in


async def test_notifications_keys_and_test_events_are_audited(
    client, tenant, pool, receiver
) -> None:
    csrf = await opened(client, tenant["apiKey"])
    url = receiver.url
    r = await client.post(
        "/portal/notifications",
        data={"csrf": csrf, "url": url, "events": ["delivery.dead", "destination.unhealthy"]},
        headers=ORIGIN,
    )
    assert r.status_code == 303, r.text
    page = await client.get("/portal/notifications")
    assert url in page.text and "delivery.dead, destination.unhealthy" in page.text
    none = await client.post(
        "/portal/notifications", data={"csrf": csrf, "url": url}, headers=ORIGIN
    )
    assert none.status_code == 200 and "at least one" in none.text
    blocked = await client.post(
        "/portal/notifications",
        data={"csrf": csrf, "url": "ftp://example.com/x", "events": "delivery.dead"},
        headers=ORIGIN,
    )
    assert blocked.status_code == 422 and "callbackUrl" not in blocked.text
    test = await client.post("/portal/notifications/test", data={"csrf": csrf}, headers=ORIGIN)
    assert test.status_code == 303 and test.headers["location"].startswith("/portal/test-events/")
    shown = await client.get(test.headers["location"])
    assert shown.status_code == 200 and "pending" in shown.text

    keys = await client.get("/portal/signing-keys")
    assert "<b>v1</b>" in keys.text and "whsec_" in keys.text
    assert tenant["signingSecret"] not in keys.text
    rotated = await client.post("/portal/signing-keys/rotate", data={"csrf": csrf}, headers=ORIGIN)
    assert rotated.status_code == 200 and "Shown once" in rotated.text
    new = re.search(r"<code>(whsec_[^<]+)</code>", rotated.text)
    assert new and new.group(1) != tenant["signingSecret"]
    assert "previous keys sign until" in rotated.text
    again = await client.get("/portal/signing-keys")
    assert new.group(1) not in again.text  # once
    ping = await client.post("/portal/test-events", data={"csrf": csrf, "url": url}, headers=ORIGIN)
    assert ping.status_code == 303
    stopped = await client.post("/portal/notifications/delete", data={"csrf": csrf}, headers=ORIGIN)
    assert stopped.status_code == 303
    actions = await pool.fetch("SELECT actor, action FROM ops_audit ORDER BY id")
    assert {r["actor"] for r in actions} == {f"portal:{tenant['id']}"}
    assert [r["action"] for r in actions] == [
        "set_notifications",
        "test_notification",
        "rotate_secret",
        "test_event",
        "delete_notifications",
    ]
    assert await pool.fetchval("SELECT count(*) FROM outbox WHERE event_type = 'ping'") == 2


async def test_v1a_public_keys_are_shown(client) -> None:
    r = await client.post(
        "/v1/admin/tenants", json={"name": "ed", "signatureScheme": "v1a"}, headers=ADMIN
    )
    made = r.json()
    await opened(client, made["apiKey"])
    page = await client.get("/portal/signing-keys")
    assert made["publicKey"] in page.text and "<b>v1a</b>" in page.text


async def test_pages_show_hostile_text_inert_and_the_overview_counts(
    client, dead, pool, runtime
) -> None:
    a, a_events = dead["a"]
    await pool.execute("UPDATE tenants SET name = $1 WHERE id = $2", HOSTILE, a.id)
    csrf = await opened(client, a.api_key)
    letter = await client.get(f"/portal/dead-letters/{a_events[0]}")
    for page in (letter, await client.get("/portal/overview")):
        assert "<script>alert(1)</script>" not in page.text and "\x1b" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b]0;PWNED\\x07" in letter.text
    assert "&#34;type&#34;: &#34;task.succeeded&#34;" in letter.text  # the body, pretty
    overview = await client.get("/portal/overview")
    assert re.search(r'id="day">9<', overview.text)  # 3 letters x 3 attempts
    assert re.search(r'id="rate">0.0%<', overview.text) and "<svg" in overview.text

    task_id = re.findall(r'data-task="(task_\w+)"', (await client.get("/portal/tasks")).text)[0]
    r = await client.post(f"/portal/tasks/{task_id}/redeliver", data={"csrf": csrf}, headers=ORIGIN)
    assert r.status_code == 303 and "Queued" in r.headers["location"]
    again = await client.post(
        f"/portal/tasks/{task_id}/redeliver", data={"csrf": csrf}, headers=ORIGIN
    )
    assert again.status_code == 303 and "Not+redelivered" in again.headers["location"]
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
    assert (
        await pool.fetchval("SELECT action FROM ops_audit WHERE actor = $1", f"portal:{a.id}")
        == "redeliver"
    )
    overview = await client.get("/portal/overview")
    assert re.search(r'id="day">1[0-2]<', overview.text)
