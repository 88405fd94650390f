"""``/docs/follow`` in a real browser (Playwright driving Chromium) against a live
``hookrelay serve``: a partner pastes an API key and a task id and watches the task go
from submitted to done over the WebSocket, each progress report as it happens; the
key is never in a URL and nothing is fetched from another origin.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.browser import chromium
from tests.support import ADMIN, bearer, dispatcher_env, serving

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CHROMIUM = chromium()


@pytest.fixture
async def serve(runtime, dsn) -> AsyncIterator[str]:
    async with serving("serve", dispatcher_env(runtime, dsn)) as url:
        yield url


async def test_a_partner_follows_a_task_live_from_submit_to_result(serve, receiver) -> None:
    from playwright.async_api import async_playwright, expect

    async with httpx.AsyncClient(base_url=serve) as api:
        key = (await api.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)).json()[
            "apiKey"
        ]
        task = (
            await api.post(
                "/v1/tasks",
                json={"type": "report.render", "callbackUrl": receiver.url},
                headers=bearer(key),
            )
        ).json()["id"]

        requested: list[str] = []
        problems: list[str] = []
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = await browser.new_page()
            page.on("request", lambda req: requested.append(req.url))
            page.on("websocket", lambda ws: requested.append(ws.url))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: problems.append(str(exc)))

            await page.goto(f"{serve}/docs/follow")
            await page.fill("#key", key)
            await page.fill("#task", task)
            await page.click("button[type=submit]")
            await expect(page.locator("#status")).to_have_text("queued", timeout=20_000)
            await expect(page.locator("#connection")).to_have_text("connected")

            await api.post(f"/v1/tasks/{task}/start", headers=ADMIN)
            await expect(page.locator("#status")).to_have_text("running", timeout=20_000)

            for percent, message in ((30, "rendering pages"), (70, "uploading the PDF")):
                r = await api.post(
                    f"/v1/tasks/{task}/progress",
                    json={"percent": percent, "message": message},
                    headers=ADMIN,
                )
                assert r.status_code == 200, r.text
                await expect(page.locator("#message")).to_have_text(message, timeout=20_000)
                await expect(page.locator("#percent")).to_have_text(f"{percent} %")
                assert await page.locator("#bar").evaluate("b => b.value") == percent

            await api.post(
                f"/v1/tasks/{task}/complete",
                json={"status": "succeeded", "result": {"url": "https://files.example/r.pdf"}},
                headers=ADMIN,
            )
            await expect(page.locator("#status")).to_have_text("succeeded", timeout=20_000)
            await expect(page.locator("#result")).to_contain_text("https://files.example/r.pdf")
            await expect(page.locator("#connection")).to_have_text("finished: succeeded")
            await browser.close()

    assert problems == [], problems  # no script error, no Content-Security-Policy violation
    ours = (serve, serve.replace("http://", "ws://", 1))
    assert [u for u in requested if not u.startswith(ours)] == []
    assert any(u.endswith("/v1/ws") for u in requested), requested
    assert not [u for u in requested if key in u]  # the key went in a message, not a URL


async def test_the_documented_browser_snippet_follows_a_task(serve, receiver) -> None:
    import re

    from playwright.async_api import async_playwright

    from tests.support import ROOT, eventually

    text = (ROOT / "docs" / "guides" / "websocket.md").read_text()
    (snippet,) = re.findall(r"```js\n(.*?)```", text, flags=re.S)
    async with httpx.AsyncClient(base_url=serve) as api:
        key = (await api.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)).json()[
            "apiKey"
        ]
        task = (
            await api.post(
                "/v1/tasks", json={"type": "t", "callbackUrl": receiver.url}, headers=bearer(key)
            )
        ).json()["id"]
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = await browser.new_page()
            await page.goto(f"{serve}/docs/follow")  # any page of this origin
            await page.evaluate(
                snippet
                + "\nwindow.seen = [];"
                + f"\nfollowTasks(location.origin, {json.dumps(key)}, [{json.dumps(task)}],"
                + " (t) => window.seen.push(t));"
            )

            async def seen() -> list[dict[str, object]]:
                return list(await page.evaluate("window.seen"))

            await eventually(seen, 20, every=0.1)
            await api.post(f"/v1/tasks/{task}/start", headers=ADMIN)
            await api.post(f"/v1/tasks/{task}/progress", json={"percent": 50}, headers=ADMIN)
            await api.post(
                f"/v1/tasks/{task}/complete", json={"status": "succeeded"}, headers=ADMIN
            )

            async def all_four() -> bool:
                return len(await seen()) == 4

            await eventually(all_four, 20, every=0.1)
            got = await seen()
            await browser.close()
    assert [t["status"] for t in got] == ["queued", "running", "running", "succeeded"]
    assert [t["version"] for t in got] == [1, 2, 3, 4]
