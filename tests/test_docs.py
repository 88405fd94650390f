"""``/docs``: Swagger UI from the package's own files, rendering ``/openapi.json`` with no CDN."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from hookrelay.service.api.routes import docs

pytestmark = pytest.mark.anyio


async def test_page_loads_only_local_files(client) -> None:
    r = await client.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "://" not in r.text  # every src and href is on this server
    assert sorted(re.findall(r'(?:src|href)="([^"]+)"', r.text)) == [
        "/docs/init.js",
        "/docs/swagger-ui-bundle.js",
        "/docs/swagger-ui.css",
        "data:,",  # no favicon request
    ]
    policy = r.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self';" in policy
    init = (await client.get("/docs/init.js")).text
    assert 'url: "/openapi.json"' in init


@pytest.mark.parametrize("name", sorted(docs.SERVED))
async def test_every_served_file_is_packaged(client, name: str) -> None:
    r = await client.get(f"/docs/{name}")
    folder, media_type = docs.SERVED[name]
    assert r.status_code == 200 and r.content == (docs.STATIC / folder / name).read_bytes()
    assert r.headers["content-type"] == media_type


async def test_licence_and_notice_are_shipped_and_served(client) -> None:
    assert "Apache License" in (await client.get("/docs/LICENSE")).text
    assert "SmartBear" in (await client.get("/docs/NOTICE")).text
    assert "swagger-ui-dist" in (docs.STATIC / "swagger-ui" / "README.md").read_text()


async def test_follow_page_loads_only_local_files_and_asks_for_no_key_in_urls(client) -> None:
    r = await client.get("/docs/follow")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "://" not in r.text
    assert sorted(re.findall(r'(?:src|href)="([^"]+)"', r.text)) == [
        "/docs/follow.css",
        "/docs/follow.js",
        "data:,",
    ]
    policy = r.headers["content-security-policy"]
    assert "connect-src 'self'" in policy and "unsafe-inline" not in policy
    # Inputs without a name: a form submitted without script puts nothing in the URL.
    inputs = re.findall(r"<input[^>]*>", r.text)
    assert len(inputs) == 2 and 'type="password"' in inputs[0]
    assert not [i for i in inputs if " name=" in i]
    script = (await client.get("/docs/follow.js")).text
    assert '"/v1/ws"' in script and 'type: "auth", token: key' in script


@pytest.mark.parametrize("name", ["nope.js", "README.md", "..%2Fdocs.py", "%2e%2e"])
async def test_other_names_are_404_with_the_error_shape(client, name: str) -> None:
    r = await client.get(f"/docs/{name}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


CHROMIUM = os.environ.get("HOOKRELAY_CHROMIUM") or shutil.which("chromium")


@pytest.mark.slow
async def test_the_page_renders_every_operation_in_a_browser(live_api) -> None:
    if CHROMIUM is None or not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser tests: install chromium (see .ci/run)")
        pytest.skip("no Chromium found (apt-get install chromium)")
    pw_api = pytest.importorskip("playwright.async_api")
    url, _ = live_api
    requested: list[str] = []
    errors: list[str] = []
    async with pw_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = await browser.new_page()
        page.on("request", lambda req: requested.append(req.url))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        await page.goto(f"{url}/docs")
        await page.wait_for_selector(".opblock", timeout=30_000)
        operations = await page.locator(".opblock").count()
        title = await page.text_content(".info .title")
        await browser.close()
    assert operations >= 20 and title and "hookrelay" in title.lower()
    assert all(u.startswith(url) for u in requested), requested  # nothing from a CDN
    assert not errors, errors  # e.g. a Content-Security-Policy violation
