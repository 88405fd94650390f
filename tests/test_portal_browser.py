"""The partner portal in a real browser (Playwright driving Chromium) against one live
``hookrelay serve`` for the module and a real receiver: a partner gets a link from the
API (the client's ``portal_link()``), opens it, sees its tasks change live, reads a
dead letter's attempts, replays it and sees it delivered, counts a range before
replaying it (the count is what the replay takes), sets its notifications and
rotates its signing secret; a second opening, an expired link, another tenant's id in
the URL, a read-only link's POST, a form without its CSRF token and a session after
the API key's rotation are all refused. No request ever leaves for another origin.

Screenshots of each page go to ``$HOOKRELAY_PORTAL_SCREENSHOTS`` (``docs`` refreshes the
pictures of docs/guides/portal.md) or to the test's temporary directory.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest

from hookrelay.client import AsyncClient
from tests.browser import chromium, screenshots
from tests.receiver import Receiver, failing_until_healthy
from tests.support import ADMIN, ADMIN_TOKEN, ServeProcess, bearer, eventually, module_serve

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CHROMIUM = chromium()


@pytest.fixture(scope="module")
def portal_serve(
    module_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    """One ``hookrelay serve`` for the module's flows, as ``hookrelay_serve`` but with a
    circuit breaker that does not open: the failing endpoint's webhooks go dead."""
    yield from module_serve(module_dsn, tmp_path_factory, breaker_threshold="10000")


@pytest.fixture
async def partner_endpoint() -> AsyncIterator[Receiver]:
    rx = await failing_until_healthy(500, "<b>down</b> for maintenance").start()
    yield rx
    await rx.stop()


async def _dead_tasks(api: httpx.AsyncClient, key: str, url: str, n: int) -> list[str]:
    """``n`` tasks of the tenant of ``key`` whose webhooks to ``url`` end dead."""
    ids = []
    for i in range(n):
        r = await api.post(
            "/v1/tasks",
            json={"type": "report.render", "input": {"n": i}, "callbackUrl": url},
            headers=bearer(key),
        )
        ids.append(r.json()["id"])
        done = await api.post(
            f"/v1/tasks/{ids[-1]}/complete",
            json={"status": "succeeded", "result": {"pages": i + 1}},
            headers=ADMIN,
        )
        assert done.status_code == 200, done.text
    await eventually(lambda: _all(api, key, ids, "dead"), 30.0, every=0.1)
    return ids


async def _all(api: httpx.AsyncClient, key: str, ids: list[str], delivery: str) -> bool:
    for task_id in ids:
        got = (await api.get(f"/v1/tasks/{task_id}", headers=bearer(key))).json()
        if got["delivery"]["status"] != delivery:
            return False
    return True


async def _event_of(api: httpx.AsyncClient, key: str, task_id: str) -> str:
    r = await api.get(f"/v1/tasks/{task_id}", headers=bearer(key))
    return str(r.json()["delivery"]["eventId"])


async def _shows(page: Any, selector: str, text: str) -> None:
    """Until ``selector`` reads ``text`` (the page reloads itself meanwhile)."""

    async def shown() -> bool:
        try:
            return bool(await page.text_content(selector) == text)
        except Exception:  # the page was reloading: look again
            return False

    await eventually(shown, 30.0, every=0.2)


async def _count(page: Any, selector: str) -> int:
    return int(await page.text_content(selector) or "0")


async def _has_class(locator: Any, name: str) -> bool:
    return name in (await locator.get_attribute("class") or "").split()


async def _browser(pw: Any) -> Any:
    return await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])


async def test_partner_recovers_its_dead_letters_in_the_portal(
    portal_serve, partner_endpoint, tmp_path
) -> None:
    from playwright.async_api import async_playwright

    serve, shots = portal_serve.url, screenshots(tmp_path, "HOOKRELAY_PORTAL_SCREENSHOTS")
    me, other = portal_serve.tenant(), portal_serve.tenant()
    key, hook = me["apiKey"], partner_endpoint.url
    requested: list[str] = []
    dialogs: list[str] = []
    async with httpx.AsyncClient(base_url=serve) as api:
        tasks = await _dead_tasks(api, key, hook, 3)
        theirs = await _dead_tasks(api, other["apiKey"], hook, 1)
        their_event = await _event_of(api, other["apiKey"], theirs[0])
        event_id = await _event_of(api, key, tasks[0])
        async with AsyncClient(serve, key) as client:
            link = await client.portal_link()
        assert link.url.startswith(f"{serve}/portal/open?token=hrp_")

        async with async_playwright() as pw:
            browser = await _browser(pw)
            page = await browser.new_page(viewport={"width": 1280, "height": 860})
            page.on("request", lambda req: requested.append(req.url))
            page.on("dialog", lambda d: dialogs.append(d.message))

            await page.goto(link.url)
            await page.wait_for_url("**/portal/overview")
            assert await page.text_content("#day") == "9"  # 3 webhooks x 3 attempts
            assert await page.text_content("#rate") == "0.0%"
            await page.screenshot(path=str(shots / "portal-overview.png"), full_page=True)

            # The same link in another browser: spent.
            elsewhere = await browser.new_context()
            again = await elsewhere.new_page()
            refused = await again.goto(link.url)
            assert refused is not None and refused.status == 410
            assert await again.is_visible("text=This link cannot be opened")
            await elsewhere.close()

            # The task list, live: a listed task's new status shows without a reload
            # (the stream carries status changes; a delivery's progress shows at reload).
            fresh = await api.post(
                "/v1/tasks",
                json={"type": "report.render", "callbackUrl": hook},
                headers=bearer(key),
            )
            fresh_id = fresh.json()["id"]
            await page.click("nav >> text=Tasks & deliveries")
            await page.wait_for_selector("#live:not([hidden])")
            row = page.locator(f"tr[data-task='{fresh_id}']")
            assert await row.locator("[data-field=status]").text_content() == "queued"
            started = await api.post(f"/v1/tasks/{fresh_id}/start", headers=ADMIN)
            assert started.status_code == 200, started.text
            # (Polled from here: the CSP refuses the string a wait_for_function evaluates.)
            await eventually(lambda: _has_class(row, "changed"), 30.0, every=0.1)
            assert await row.locator("[data-field=status]").text_content() == "running"
            assert await _count(page, "#live-count") >= 1
            assert not await _has_class(page.locator(f"tr[data-task='{tasks[0]}']"), "changed")
            await page.screenshot(path=str(shots / "portal-tasks.png"), full_page=True)
            await page.select_option("select[name=delivery]", "dead")
            await page.click("form.filters button")
            assert await page.locator("tr[data-task]").count() == 3

            await page.click(f"text={tasks[1]}")
            await page.wait_for_url(f"**/portal/tasks/{tasks[1]}")
            assert await page.locator("ol.timeline li").count() == 3
            assert "<b>down</b> for maintenance" in (await page.text_content("ol.timeline") or "")
            assert "report.render" in (await page.text_content("pre.body") or "")
            await page.screenshot(path=str(shots / "portal-task.png"), full_page=True)

            # Another tenant's ids typed into the URL: not found.
            for path in (f"/portal/tasks/{theirs[0]}", f"/portal/dead-letters/{their_event}"):
                answer = await page.goto(f"{serve}{path}")
                assert answer is not None and answer.status == 404, path

            # One letter: its attempts, then Replay once the endpoint is fixed.
            await page.goto(f"{serve}/portal/dead-letters")
            assert await page.locator("#letters tbody tr").count() == 3
            await page.screenshot(path=str(shots / "portal-dead-letters.png"), full_page=True)
            await page.click(f"text={event_id}")
            await page.wait_for_url(f"**/portal/dead-letters/{event_id}")
            assert await page.locator("ol.timeline li.retry").count() == 2
            await page.screenshot(path=str(shots / "portal-dead-letter.png"), full_page=True)
            partner_endpoint.state["healthy"]["ok"] = True
            await page.fill("input[name=reason]", "endpoint fixed")
            await page.click("#replay")
            assert await page.is_visible("text=Replayed: queued for delivery again.")
            await eventually(lambda: _all(api, key, tasks[:1], "delivered"), 30.0, every=0.1)
            await page.goto(f"{serve}/portal/tasks/{tasks[0]}")
            assert await page.text_content("#delivery") == "delivered"
            assert await page.locator("ol.timeline li.delivered").count() == 1

            # A range: its count first, then the replay, which takes as many.
            await page.click("nav >> text=Dead letters")
            await page.click("#dry-run")
            counted = int(await page.text_content("#preview-count") or "-1")
            assert counted == 2
            await page.screenshot(path=str(shots / "portal-replay-range.png"), full_page=True)
            await page.click("button[name=confirm]")
            assert await page.is_visible(f"text=Replayed {counted} dead letter(s).")
            await eventually(lambda: _all(api, key, tasks, "delivered"), 30.0, every=0.1)
            assert await page.locator("#letters tbody tr td.empty").count() == 1

            # A form posted without its CSRF token is refused, and changes nothing.
            forged = await page.request.post(
                f"{serve}/portal/dead-letters/replay",
                form={"confirm": "yes"},
                headers={"Origin": serve},
            )
            assert forged.status == 400 and "expired" in await forged.text()

            # Notifications: set, test, see the last ones.
            await page.click("nav >> text=Notifications")
            await page.fill("input[name=url]", hook)
            await page.click("#save-notifications")
            assert await page.is_visible("text=Notification settings saved.")
            await page.click("#test-notification")
            await page.wait_for_url("**/portal/test-events/*")
            await _shows(page, "#test-state", "delivered")
            await page.goto(f"{serve}/portal/notifications")
            await page.screenshot(path=str(shots / "portal-notifications.png"), full_page=True)

            # Signing keys: the new secret shown once, the overlap's end beside it.
            await page.click("nav >> text=Signing keys")
            await page.click("#rotate")
            shown = await page.text_content("#shown") or ""
            secret = re.search(r"whsec_\S+", shown)
            assert secret and secret.group() != me["signingSecret"]
            assert "previous keys sign until" in shown
            await page.screenshot(path=str(shots / "portal-signing-keys.png"), full_page=True)
            await page.fill("input[name=url]", hook)
            await page.click("#send-test")
            await _shows(page, "#test-state", "delivered")

            # The ops console's audit view shows what the partner did, by name.
            ops = await browser.new_context()
            console = await ops.new_page()
            await console.goto(f"{serve}/ops/sign-in")
            await console.fill("input[name=token]", ADMIN_TOKEN)
            await console.click("form.card button")
            await console.goto(f"{serve}/ops/audit")
            audit = await console.text_content("table") or ""
            actor = f"portal:{me['id']}"
            for action in ("replay", "bulk_replay", "set_notifications", "rotate_secret"):
                assert f"{actor}{action}1" in audit or f"{actor}{action}2" in audit, action
            await ops.close()

            # The key's rotation ends the session at once.
            r = await api.post(f"/v1/admin/tenants/{me['id']}/rotate-key", headers=ADMIN)
            assert r.status_code == 200
            ended = await page.goto(f"{serve}/portal/overview")
            assert ended is not None and ended.status == 401
            assert await page.is_visible("text=Ask for a new portal link")
            await browser.close()

    assert dialogs == []
    foreign = [u for u in requested if not u.startswith(serve)]
    assert foreign == [], foreign


async def test_expired_and_read_only_links(
    portal_serve, module_dsn, partner_endpoint, tmp_path
) -> None:
    from playwright.async_api import async_playwright

    serve = portal_serve.url
    me = portal_serve.tenant()
    key = me["apiKey"]
    async with httpx.AsyncClient(base_url=serve) as api:
        (task_id,) = await _dead_tasks(api, key, partner_endpoint.url, 1)
        event_id = await _event_of(api, key, task_id)
        async with AsyncClient(serve, key) as client:
            expired = await client.portal_link()
            viewer = await client.portal_link(read_only=True)
        conn = await asyncpg.connect(module_dsn)
        try:
            await conn.execute(
                "UPDATE portal_links SET expires_at = now() - interval '1 second'"
                " WHERE tenant_id = $1 AND NOT read_only",
                me["id"],
            )
        finally:
            await conn.close()

        async with async_playwright() as pw:
            browser = await _browser(pw)
            page = await browser.new_page()
            answer = await page.goto(expired.url)
            assert answer is not None and answer.status == 410

            await page.goto(viewer.url)
            await page.wait_for_url("**/portal/overview")
            assert await page.is_visible("header >> text=read-only")
            await page.goto(f"{serve}/portal/dead-letters/{event_id}")
            assert await page.locator("ol.timeline li").count() == 3
            assert await page.locator("#replay").count() == 0
            await page.goto(f"{serve}/portal/dead-letters")
            assert await page.locator("#dry-run").count() == 0
            await page.goto(f"{serve}/portal/tasks/{task_id}")
            assert await page.locator("#redeliver").count() == 0
            csrf = await page.get_attribute("input[name=csrf]", "value")
            refused = await page.request.post(
                f"{serve}/portal/dead-letters/{event_id}/replay",
                form={"csrf": csrf or ""},
                headers={"Origin": serve},
            )
            assert refused.status == 403 and "read-only" in await refused.text()
            await browser.close()
        letter = await api.get(f"/v1/dead-letters/{event_id}", headers=bearer(key))
        assert letter.json()["replayedAt"] is None
