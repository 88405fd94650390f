"""The ops console in a real browser (Playwright driving Chromium) against a live
``hookrelay serve``: an operator finds a failing partner's dead letters, reads the
attempt timeline, previews and runs a bulk replay with a reason, sees the events
delivered, and closes a circuit; no request ever leaves for another origin.

Screenshots of each page go to ``$HOOKRELAY_OPS_SCREENSHOTS`` (``docs`` refreshes the
pictures of docs/operations/console.md) or to the test's temporary directory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.browser import chromium, screenshots
from tests.receiver import Receiver, failing_until_healthy
from tests.support import ADMIN, ADMIN_TOKEN, bearer, dispatcher_env, eventually, serving
from tests.test_console import HOSTILE

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CHROMIUM = chromium()


@pytest.fixture
async def serve(runtime, dsn) -> AsyncIterator[str]:
    env = dispatcher_env(runtime, dsn, max_attempts="3", retry_base_s="0.05")
    async with serving("serve", env) as url:
        yield url


@pytest.fixture
async def partner() -> AsyncIterator[Receiver]:
    rx = await failing_until_healthy(500, HOSTILE).start()
    yield rx
    await rx.stop()


async def test_operator_finds_understands_and_replays(serve, partner, pool, tmp_path) -> None:
    shots = screenshots(tmp_path, "HOOKRELAY_OPS_SCREENSHOTS")
    async with httpx.AsyncClient(base_url=serve) as api:
        tenant = (
            await api.post("/v1/admin/tenants", json={"name": "Globex"}, headers=ADMIN)
        ).json()
        await api.post("/v1/admin/tenants", json={"name": "Initech"}, headers=ADMIN)
        tasks = []
        for i in range(3):
            r = await api.post(
                "/v1/tasks",
                json={"type": "invoice.render", "input": {"n": i}, "callbackUrl": partner.url},
                headers=bearer(tenant["apiKey"]),
            )
            tasks.append(r.json()["id"])
            await api.post(
                f"/v1/tasks/{tasks[-1]}/complete",
                json={"status": "succeeded", "result": {"pages": i + 1}},
                headers=ADMIN,
            )

        async def all_dead() -> bool:
            got = [
                (await api.get(f"/v1/tasks/{t}", headers=bearer(tenant["apiKey"]))).json()
                for t in tasks
            ]
            return all(t["delivery"]["status"] == "dead" for t in got)

        await eventually(all_dead, 30.0, every=0.1)
        event_id = (
            await api.get(f"/v1/tasks/{tasks[0]}", headers=bearer(tenant["apiKey"]))
        ).json()["delivery"]["eventId"]

        from playwright.async_api import async_playwright

        requested: list[str] = []
        dialogs: list[str] = []
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            page.on("request", lambda req: requested.append(req.url))
            page.on("dialog", lambda d: dialogs.append(d.message))

            await page.goto(f"{serve}/ops")
            assert page.url.endswith("/ops/sign-in")
            await page.fill("input[name=token]", "wrong")
            await page.click("text=Sign in >> nth=-1")
            assert await page.is_visible("text=That is not the admin token")
            await page.fill("input[name=token]", ADMIN_TOKEN)
            await page.click("form.card button")
            await page.wait_for_url("**/ops/overview")
            assert await page.text_content("#dead24") == "3"
            await page.screenshot(path=str(shots / "ops-overview.png"), full_page=True)

            await page.click("nav >> text=Dead letters")
            await page.fill("input[name=tenant]", tenant["id"])
            await page.select_option("select[name=errorClass]", "http_5xx")
            await page.click("form.filters button")
            assert await page.locator("input[name=eventId]").count() == 3
            await page.screenshot(path=str(shots / "ops-dead-letters.png"), full_page=True)

            await page.click(f"text={event_id}")
            await page.wait_for_url(f"**/ops/events/{event_id}")
            assert await page.locator("ol.timeline li").count() == 3
            text = await page.text_content("ol.timeline")
            assert "<script>alert(1)</script>\\x1b]0;PWNED\\x07" in (text or "")
            await page.screenshot(path=str(shots / "ops-event.png"), full_page=True)
            await page.go_back()

            await page.fill("form.card >> input[name=reason]", "Globex fixed their endpoint")
            await page.click("text=Preview")
            assert "Would replay 3" in (await page.text_content("#preview") or "")
            await page.screenshot(path=str(shots / "ops-bulk-replay.png"), full_page=True)
            partner.state["healthy"]["ok"] = True
            await page.click("button[name=confirm]")
            assert await page.is_visible("text=Replayed 3 dead letter(s).")

            async def all_delivered() -> bool:
                got = [
                    (await api.get(f"/v1/tasks/{t}", headers=bearer(tenant["apiKey"]))).json()
                    for t in tasks
                ]
                return all(t["delivery"]["status"] == "delivered" for t in got)

            await eventually(all_delivered, 30.0, every=0.1)
            await page.goto(f"{serve}/ops/events/{event_id}")
            assert await page.locator("ol.timeline li.delivered").count() == 1

            host = "http://203.0.113.7:80"
            await pool.execute(
                "INSERT INTO destinations (host, state, consecutive_failures, last_error,"
                " opened_at, probe_at) VALUES ($1, 'open', 10, 'HTTP 503', now(),"
                " now() + interval '1 hour')",
                host,
            )
            await page.click("nav >> text=Destinations")
            await page.screenshot(path=str(shots / "ops-destinations.png"), full_page=True)
            await page.fill("td >> input[name=reason]", "partner confirmed recovery")
            await page.click("text=Close circuit now")
            assert await page.is_visible(f"text=Closed {host}.")
            assert await pool.fetchval("SELECT state FROM destinations WHERE host = $1", host) == (
                "closed"
            )

            await page.click("nav >> text=Tenants")
            await page.screenshot(path=str(shots / "ops-tenants.png"), full_page=True)
            await page.click("nav >> text=Audit")
            audit = await page.text_content("table") or ""
            assert "bulk_replay" in audit and "Globex fixed their endpoint" in audit
            assert "close_circuit" in audit
            await page.screenshot(path=str(shots / "ops-audit.png"), full_page=True)

            await page.fill("input[name=q]", tasks[1])
            await page.press("input[name=q]", "Enter")
            await page.wait_for_url(f"**/ops/tasks/{tasks[1]}")
            await browser.close()

    assert dialogs == []  # the receiver's <script> never ran
    foreign = [u for u in requested if not u.startswith(serve)]
    assert foreign == [], foreign
