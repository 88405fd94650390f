"""The hot routes past the router (service/api/hot_path.py): the same answers either way in,
and a database error nothing maps answered with 503, never a dropped connection."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest
from starlette.applications import Starlette

from hookrelay.service.api.hot_path import HOT_ROUTES, HotPath
from hookrelay.service.api.routes import tasks
from tests.support import ADMIN, bearer

pytestmark = pytest.mark.anyio

HOOK = "http://127.0.0.1:9/hook"


def routed(app: Starlette) -> None:
    """From now on ``app`` serves every route through Starlette's router."""
    app.user_middleware = [m for m in app.user_middleware if m.cls is not HotPath]  # type: ignore[comparison-overlap]
    app.middleware_stack = None  # rebuilt, without the hot path, by the next request


def answer(r: httpx.Response) -> tuple[int, list[tuple[str, str]], bytes]:
    return r.status_code, sorted(r.headers.multi_items()), r.content


async def exchanges(c: httpx.AsyncClient, key: str, task_id: str) -> list[Any]:
    """Requests of every hot route whose answers do not depend on the moment they are made."""
    json_type = {"Content-Type": "application/json"}
    asks: list[tuple[str, str, dict[str, str], bytes | None]] = [
        ("GET", f"/v1/tasks/{task_id}", bearer(key), None),
        ("GET", "/v1/tasks/task_unknown", bearer(key), None),
        ("GET", f"/v1/tasks/{task_id}", {}, None),
        ("GET", f"/v1/tasks/{task_id}?wait=nope", bearer(key), None),
        ("POST", "/v1/tasks", {**bearer(key), **json_type}, b'{"type": "x"'),
        ("POST", "/v1/tasks", {**bearer(key), **json_type}, b'{"type": "x"}'),
        ("POST", "/v1/tasks", {**bearer(key), "Content-Type": "text/plain"}, b"{}"),
        ("POST", "/v1/tasks", bearer("wrong"), b"{}"),
        ("POST", "/v1/tasks", ADMIN, b'{"type": "x", "callbackUrl": "' + HOOK.encode() + b'"}'),
        ("POST", f"/v1/tasks/{task_id}/complete", bearer(key), b'{"status": "succeeded"}'),
        ("POST", f"/v1/tasks/{task_id}/complete", ADMIN, b'{"status": "nope"}'),
        ("POST", f"/v1/tasks/{task_id}/complete", ADMIN, b'{"status": "failed"}'),  # 409
        ("POST", "/v1/tasks/task_unknown/complete", ADMIN, b'{"status": "failed"}'),
        ("PUT", f"/v1/tasks/{task_id}", bearer(key), None),  # the router's 405
        ("HEAD", f"/v1/tasks/{task_id}", bearer(key), None),
    ]
    out = []
    for method, path, headers, body in asks:
        r = await c.request(method, path, headers=headers, content=body)
        out.append((method, path, *answer(r)))
    etag = (await c.get(f"/v1/tasks/{task_id}", headers=bearer(key))).headers["etag"]
    r = await c.get(f"/v1/tasks/{task_id}", headers={**bearer(key), "If-None-Match": etag})
    out.append(("GET", "304", *answer(r)))
    return out


async def test_the_hot_routes_answer_as_the_router_does(client, tenant) -> None:
    key = tenant["apiKey"]
    r = await client.post("/v1/tasks", json={"type": "x", "callbackUrl": HOOK}, headers=bearer(key))
    assert r.status_code == 202, r.text
    task_id = r.json()["id"]
    r = await client.post(
        f"/v1/tasks/{task_id}/complete", json={"status": "succeeded"}, headers=ADMIN
    )
    assert r.status_code == 200, r.text

    hot = await exchanges(client, key, task_id)
    app = client._transport.app
    routed(app)
    by_router = await exchanges(client, key, task_id)
    assert [h[:3] for h in hot] == [b[:3] for b in by_router]
    for h, b in zip(hot, by_router, strict=True):
        assert h == b, (h[:2], h[2:], b[2:])
    # Not vacuous: the answers cover successes and each kind of refusal.
    assert {h[2] for h in hot} >= {200, 304, 400, 401, 403, 404, 405, 409, 415, 422}


async def test_a_submit_through_each_way_makes_the_same_task(client, tenant) -> None:
    key = tenant["apiKey"]
    body = {"type": "x", "callbackUrl": HOOK, "input": {"n": 1}, "metadata": {"m": "v"}}
    first = await client.post("/v1/tasks", json=body, headers=bearer(key))
    routed(client._transport.app)
    second = await client.post("/v1/tasks", json=body, headers=bearer(key))
    assert first.status_code == second.status_code == 202
    assert sorted(first.headers) == sorted(second.headers)
    a, b = first.json(), second.json()
    changing = {"id", "createdAt", "updatedAt"}
    assert {k: v for k, v in a.items() if k not in changing} == {
        k: v for k, v in b.items() if k not in changing
    }
    assert first.headers["location"] == f"/v1/tasks/{a['id']}"


async def test_only_the_hot_routes_are_taken() -> None:
    seen: list[str] = []

    async def rest(scope: Any, receive: Any, send: Any) -> None:
        seen.append(f"{scope['method']} {scope['path']}")

    hot = HotPath(rest, tasks.routes)
    for method, path in [
        ("POST", "/v1/tasks"),
        ("GET", "/v1/tasks/task_a"),
        ("POST", "/v1/tasks/task_a/complete"),
    ]:
        route, _ = hot._match(method, path)
        assert route is not None and (method, route.path) in HOT_ROUTES
    assert hot._match("GET", "/v1/tasks/task_a")[1] == "task_a"
    assert hot._match("POST", "/v1/tasks/task_a/complete")[1] == "task_a"
    others = [
        ("GET", "/v1/tasks"),
        ("GET", "/v1/tasks/"),
        ("GET", "/v1/tasks/a/b"),
        ("GET", "/v1/tasks/a/deliveries"),
        ("HEAD", "/v1/tasks/a"),
        ("PUT", "/v1/tasks/a"),
        ("POST", "/v1/tasks/"),
        ("POST", "/v1/tasks//complete"),
        ("POST", "/v1/tasks/a/b/complete"),
        ("POST", "/v1/tasks/a/complete/"),
        ("POST", "/v1/tasks/a/start"),
        ("GET", "/v1/tasks/a/complete"),
        ("POST", "/v1/taskscomplete"),
        ("POST", "/v2/tasks"),
    ]
    for method, path in others:
        assert hot._match(method, path) == (None, None), (method, path)
        scope = {"type": "http", "method": method, "path": path}
        await hot(scope, None, None)  # type: ignore[arg-type]
    assert seen == [f"{m} {p}" for m, p in others]


@pytest.fixture
async def refusing(pool: asyncpg.Pool):
    """A trigger that makes the database refuse every new task and every task update."""
    async with pool.acquire() as conn:
        await conn.execute(
            """
            CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'refused by a test trigger'; END $$;
            """
        )
    yield
    async with pool.acquire() as conn:
        await conn.execute("DROP FUNCTION test_refuse() CASCADE")


async def test_an_unmapped_database_error_is_a_503_on_the_wire(
    serve_app, pool: asyncpg.Pool, refusing: None, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve_app() as served, httpx.AsyncClient(base_url=served.url) as c:
        r = await c.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)
        key = r.json()["apiKey"]
        r = await c.post("/v1/tasks", json={"type": "x", "callbackUrl": HOOK}, headers=bearer(key))
        task_id = r.json()["id"]
        async with pool.acquire() as conn:
            await conn.execute(
                "CREATE TRIGGER test_refuse BEFORE INSERT OR UPDATE ON tasks"
                " FOR EACH ROW EXECUTE FUNCTION test_refuse()"
            )
        asks = [
            ("POST", "/v1/tasks", bearer(key), {"type": "x", "callbackUrl": HOOK}),  # hot path
            ("POST", f"/v1/tasks/{task_id}/complete", ADMIN, {"status": "failed"}),  # hot path
            ("POST", f"/v1/tasks/{task_id}/cancel", bearer(key), None),  # the router
        ]
        for method, path, headers, body in asks:
            r = await c.request(method, path, headers=headers, json=body)
            assert r.status_code == 503, (path, r.text)
            assert r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == "unavailable"
        # Nothing was written, and the API goes on answering.
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM tasks") == 1
            await conn.execute("DROP TRIGGER test_refuse ON tasks")
        r = await c.post(f"/v1/tasks/{task_id}/complete", json={"status": "failed"}, headers=ADMIN)
        assert r.status_code == 200
    logged = [rec.getMessage() for rec in caplog.records if "database error" in rec.getMessage()]
    assert logged and all("RaiseError: refused by a test trigger" in m for m in logged)
