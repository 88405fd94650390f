"""API-key cache: successes only, bounded, expiring; a wrong key always reaches the database."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from hookrelay.service.api.auth import KeyCache
from tests.support import bearer, eventually

pytestmark = pytest.mark.anyio


def test_cache_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("hookrelay.service.api.auth.time.monotonic", lambda: now[0])
    cache = KeyCache(ttl_s=30)
    cache.put(b"d", "ten_a")
    assert cache.get(b"d") == "ten_a"
    now[0] += 31
    assert cache.get(b"d") is None


def test_cache_is_bounded() -> None:
    cache = KeyCache(size=3)
    for i in range(5):
        cache.put(bytes([i]), f"ten_{i}")
    assert [cache.get(bytes([i])) for i in range(5)] == [None, None, "ten_2", "ten_3", "ten_4"]


async def test_only_successes_are_cached(client: httpx.AsyncClient, tenant: dict[str, Any]) -> None:
    state = client._transport.app.state  # type: ignore[attr-defined]
    cache: KeyCache = state.key_cache
    # Until its LISTEN is in place the process may miss a rotation: what it cached by then
    # is forgotten once it is (a gap), so the test starts after that.
    await eventually(lambda: state.listener.connected, 5)
    for _ in range(2):
        r = await client.get("/v1/tasks", headers=bearer(tenant["apiKey"] + "x"))
        assert r.status_code == 401
    assert len(cache._entries) == 0
    r = await client.get("/v1/tasks", headers=bearer(tenant["apiKey"]))
    assert r.status_code == 200 and len(cache._entries) == 1
    # What is kept is the digest, never the key.
    assert all(tenant["apiKey"].encode() not in k for k in cache._entries)


# Every route × every kind of caller. "owner" owns the task (a queued one) and
# its tenant; "other" is a second tenant. Anyone-routes answer everyone alike.
ROUTES: list[tuple[str, str, dict[str, int]]] = [
    # method, path,                               expected status per caller
    ("POST", "/v1/tasks",                         {"owner": 202, "other": 202, "admin": 403}),
    ("GET", "/v1/tasks",                          {"owner": 200, "other": 200, "admin": 403}),
    ("GET", "/v1/tasks/{task}",                   {"owner": 200, "other": 404, "admin": 200}),
    ("GET", "/v1/tasks/{task}/deliveries",        {"owner": 200, "other": 404, "admin": 200}),
    ("POST", "/v1/tasks/{task}/redeliver",        {"owner": 409, "other": 404, "admin": 409}),
    ("POST", "/v1/tasks/{task}/start",            {"owner": 403, "other": 403, "admin": 200}),
    ("POST", "/v1/tasks/{task}/complete",         {"owner": 403, "other": 403, "admin": 200}),
    ("POST", "/v1/tasks/{task}/cancel",           {"owner": 200, "other": 404, "admin": 200}),
    ("POST", "/v1/admin/tenants",                 {"owner": 403, "other": 403, "admin": 201}),
    ("POST", "/v1/admin/tenants/{tenant}/rotate-secret",
                                                  {"owner": 403, "other": 403, "admin": 200}),
    ("GET", "/v1/admin/dead-letters",             {"owner": 403, "other": 403, "admin": 200}),
    ("GET", "/v1/admin/dead-letters/evt_none",    {"owner": 403, "other": 403, "admin": 404}),
    ("POST", "/v1/admin/dead-letters/evt_none/replay",
                                                  {"owner": 403, "other": 403, "admin": 404}),
    ("POST", "/v1/admin/dead-letters/replay",     {"owner": 403, "other": 403, "admin": 200}),
    ("GET", "/v1/admin/destinations",             {"owner": 403, "other": 403, "admin": 200}),
    # Series name tenants and failing hosts: the admin or the metrics token only.
    ("GET", "/metrics",                           {"owner": 401, "other": 401, "admin": 200}),
]  # fmt: skip
BODIES = {
    "/v1/tasks": {"type": "t", "callbackUrl": "http://127.0.0.1:9/in"},
    "/v1/tasks/{task}/complete": {"status": "succeeded"},
    "/v1/admin/tenants": {"name": "n"},
    "/v1/admin/dead-letters/replay": {},
}
ANYONE = ["/healthz", "/readyz", "/openapi.json"]


def _credentials(tenant: dict[str, Any], other: dict[str, Any]) -> dict[str, dict[str, str]]:
    from tests.support import ADMIN

    return {
        "none": {},
        "wrong": bearer("hr_" + "x" * 40),
        "malformed": {"Authorization": "Basic " + tenant["apiKey"]},
        "owner": bearer(tenant["apiKey"]),
        "other": bearer(other["apiKey"]),
        "admin": ADMIN,
    }


@pytest.mark.parametrize(
    ("method", "path", "expected"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES]
)
async def test_auth_matrix(
    client: httpx.AsyncClient,
    tenant: dict[str, Any],
    other_tenant: dict[str, Any],
    method: str,
    path: str,
    expected: dict[str, int],
) -> None:
    creds = _credentials(tenant, other_tenant)
    got: dict[str, int] = {}
    for who in ("none", "wrong", "malformed", "other", "owner", "admin"):
        # A fresh queued task per caller, so one caller's change cannot decide another's answer.
        r = await client.post("/v1/tasks", json=BODIES["/v1/tasks"], headers=creds["owner"])
        url = path.format(task=r.json()["id"], tenant=tenant["id"])
        r = await client.request(method, url, json=BODIES.get(path), headers=creds[who])
        got[who] = r.status_code
        if r.status_code >= 400:
            err = r.json()["error"]
            assert err["code"] and err["message"], r.text
        if r.status_code == 401:
            assert r.headers["www-authenticate"].lower().startswith("bearer")
    assert got == {"none": 401, "wrong": 401, "malformed": 401, **expected}


@pytest.mark.parametrize("path", ANYONE)
async def test_public_routes_answer_anyone(
    client: httpx.AsyncClient, tenant: dict[str, Any], other_tenant: dict[str, Any], path: str
) -> None:
    for headers in _credentials(tenant, other_tenant).values():
        assert (await client.get(path, headers=headers)).status_code == 200


def test_credentials_are_compared_in_constant_time() -> None:
    import inspect

    from hookrelay.outbox import tenants
    from hookrelay.service.api import auth

    # Both comparisons of a presented secret go through hmac.compare_digest; the bearer
    # header and the WebSocket's auth message both reach them through auth.identify.
    assert "identify(" in inspect.getsource(auth.caller)
    assert "hmac.compare_digest" in inspect.getsource(auth.identify)
    assert "hmac.compare_digest" in inspect.getsource(tenants.authenticate)


async def test_metrics_token_reads_metrics_only(
    runtime: Any, pool: Any, tenant: dict[str, Any]
) -> None:
    from dataclasses import replace

    from hookrelay.service.server.app import create_app

    token = "metrics-" + "m" * 20
    rt = replace(runtime, settings=replace(runtime.settings, metrics_token=token))
    app = create_app(rt, pool=pool)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://hookrelay.test") as c,
    ):
        r = await c.get("/metrics", headers=bearer(token))
        assert r.status_code == 200 and "hookrelay_outbox_depth" in r.text
        assert (await c.get("/metrics", headers=bearer(token + "x"))).status_code == 401
        assert (await c.get("/metrics")).status_code == 401
        # The metrics token is nothing more.
        assert (await c.get("/v1/admin/destinations", headers=bearer(token))).status_code == 401
        assert (await c.get("/v1/tasks", headers=bearer(token))).status_code == 401


@pytest.mark.parametrize("path", ["/v1/tasks/", "/metrics/", "/v1/admin/tenants/"])
async def test_trailing_slash_is_404_not_a_redirect(
    client: httpx.AsyncClient, tenant: dict[str, Any], path: str
) -> None:
    r = await client.post(path, headers={**bearer(tenant["apiKey"]), "Host": "evil.example"})
    assert r.status_code == 404 and "location" not in r.headers
    assert r.json()["error"]["code"] == "not_found"
