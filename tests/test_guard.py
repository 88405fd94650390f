"""The parsing layer: every class of unstorable input is a 400/422, on every route that takes it.

Cases are generated from /openapi.json, which test_openapi holds equal to the served
routes: a new route, parameter or body is covered without touching this file.
"""

from __future__ import annotations

import base64
import json
import secrets
from typing import Any

import asyncpg
import httpx
import pytest

from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store.pool import create_pool
from hookrelay.service.api import request_guard as guard
from hookrelay.service.api.errors import Unprocessable
from hookrelay.service.api.openapi import spec
from hookrelay.service.server.app import create_app
from hookrelay.service.server.prerequisites import Runtime
from hookrelay.service.server.settings import Settings
from tests.support import ADMIN, bearer

pytestmark = pytest.mark.anyio

SPEC = spec()
OPS = [
    (method.upper(), path, op)
    for path, ops in SPEC["paths"].items()
    for method, op in ops.items()
    if path != "/openapi.json"
]


def _params(kind: str, pred: Any = lambda schema: True) -> list[tuple[str, str, str]]:
    return [
        (method, path, p["name"])
        for method, path, op in OPS
        for p in op.get("parameters", [])
        if p["in"] == kind and pred(p["schema"])
    ]


def _ids(cases: list[tuple[Any, ...]]) -> list[str]:
    return [" ".join(str(c) for c in case) for case in cases]


PATH_PARAMS = _params("path")
QUERY_PARAMS = _params("query")
DATE_PARAMS = _params("query", lambda s: s.get("format") == "date-time")
NUMBER_PARAMS = _params("query", lambda s: s.get("type") in {"integer", "number"})
CURSOR_PARAMS = [c for c in QUERY_PARAMS if c[2] == "cursor"]
BODY_OPS = [(m, p) for m, p, op in OPS if "requestBody" in op]


def _options(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The schemas an optional field may match (``anyOf`` with null), or the one."""
    return schema.get("anyOf", [schema])  # type: ignore[no-any-return]


def _body_fields(op: dict[str, Any]) -> dict[str, Any]:
    """The fields of the component an operation's request body refers to."""
    ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    component = SPEC["components"]["schemas"][ref.removeprefix("#/components/schemas/")]
    return component.get("properties", {})  # type: ignore[no-any-return]


DATE_BODY_FIELDS = [
    (m, p, name)
    for m, p, op in OPS
    if "requestBody" in op
    for name, schema in _body_fields(op).items()
    if any(s.get("format") == "date-time" for s in _options(schema))
]


@pytest.fixture(scope="module")
async def env(server_dsn: str, template_db: str, tmp_path_factory: Any) -> Any:
    """One database, app and tenant for the whole module: every case here is refused
    before it could write, and a database per case made the module take minutes."""
    from dataclasses import replace

    from tests.support import ADMIN_TOKEN, clone_template, with_database

    name = await clone_template(server_dsn, template_db)
    dsn = with_database(server_dsn, name)
    key = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("guard"),
        admin_token=ADMIN_TOKEN,
        allow_private_cidrs="127.0.0.0/8,::1/128",
        allow_http=True,
    )
    runtime = Runtime(
        settings=replace(settings, master_key=key),
        dsn=dsn,
        admin_token=ADMIN_TOKEN,
        secret_box=SecretBox(base64.urlsafe_b64decode(key)),
        admin_token_created=False,
        embedded=False,
    )
    pool = await create_pool(dsn, min_size=1, max_size=5)
    app = create_app(runtime, pool=pool)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://h.test") as c:
                r = await c.post("/v1/admin/tenants", json={"name": "guard"}, headers=ADMIN)
                tenant = r.json()
                r = await c.post(
                    "/v1/tasks",
                    json={"type": "t", "callbackUrl": "http://127.0.0.1:9/in"},
                    headers=bearer(tenant["apiKey"]),
                )
                ids = {"task_id": r.json()["id"], "tenant_id": tenant["id"], "event_id": "evt_x"}
                yield c, tenant, ids
    finally:
        await pool.close()
        conn = await asyncpg.connect(server_dsn)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()


@pytest.fixture
def client(env: Any) -> httpx.AsyncClient:
    return env[0]  # type: ignore[no-any-return]


@pytest.fixture
def tenant(env: Any) -> dict[str, Any]:
    return env[1]  # type: ignore[no-any-return]


@pytest.fixture
def ids(env: Any) -> dict[str, str]:
    return env[2]  # type: ignore[no-any-return]


async def _send(
    client: httpx.AsyncClient,
    tenant: dict[str, Any],
    method: str,
    url: str,
    **kw: Any,
) -> httpx.Response:
    """As the admin; again with the tenant key where the route is the tenant's."""
    extra = kw.pop("headers", {})
    r = await client.request(method, url, headers={**ADMIN, **extra}, **kw)
    if r.status_code == 403:
        r = await client.request(method, url, headers={**bearer(tenant["apiKey"]), **extra}, **kw)
    return r


class _Ids(dict[str, str]):
    def __missing__(self, key: str) -> str:  # a path parameter no fixture knows: any value
        return "x"


def _url(path: str, ids: dict[str, str], **override: str) -> str:
    return path.format_map(_Ids({**ids, **override}))


def _refused(r: httpx.Response, *statuses: int) -> None:
    assert r.status_code in statuses, (r.status_code, r.text)
    err = r.json()["error"]
    assert err["code"] and err["message"]


@pytest.mark.parametrize(("method", "path", "name"), PATH_PARAMS, ids=_ids(PATH_PARAMS))
async def test_nul_in_path_id(client, tenant, ids, method: str, path: str, name: str) -> None:
    url = _url(path, ids, **{name: "task_%00x"})
    _refused(await _send(client, tenant, method, url), 400)


@pytest.mark.parametrize(("method", "path", "name"), QUERY_PARAMS, ids=_ids(QUERY_PARAMS))
async def test_nul_in_query(client, tenant, ids, method: str, path: str, name: str) -> None:
    r = await _send(client, tenant, method, _url(path, ids), params={name: "a\x00b"})
    _refused(r, 400)


@pytest.mark.parametrize(("method", "path"), [(m, p) for m, p, _ in OPS])
async def test_nul_in_a_header(client, tenant, ids, method: str, path: str) -> None:
    for header in ("Idempotency-Key", "If-None-Match", "X-Anything"):
        headers = {header: "a\x00b"}
        r = await _send(client, tenant, method, _url(path, ids), headers=headers)
        _refused(r, 400)


@pytest.mark.parametrize(("method", "path", "name"), DATE_PARAMS, ids=_ids(DATE_PARAMS))
@pytest.mark.parametrize(
    "value",
    ["0001-01-01T00:00:00+01:00", "２０２６-01-01T00:00:00Z", "2026-13-01T00:00:00Z", "yesterday"],
)
async def test_bad_date_in_query(client, tenant, ids, method, path, name, value) -> None:
    r = await _send(client, tenant, method, _url(path, ids), params={name: value})
    _refused(r, 400)


@pytest.mark.parametrize(("method", "path", "name"), DATE_BODY_FIELDS, ids=_ids(DATE_BODY_FIELDS))
async def test_bad_date_in_body(client, tenant, ids, method, path, name) -> None:
    body = {name: "0001-01-01T00:00:00+01:00"}
    _refused(await _send(client, tenant, method, _url(path, ids), json=body), 400, 422)


@pytest.mark.parametrize(("method", "path", "name"), NUMBER_PARAMS, ids=_ids(NUMBER_PARAMS))
@pytest.mark.parametrize("value", ["\u00b2", "\u0661\u0662", "1e400", "nan", "-1", "0x10", " 1"])
async def test_bad_number_in_query(client, tenant, ids, method, path, name, value) -> None:
    r = await _send(client, tenant, method, _url(path, ids), params={name: value})
    _refused(r, 400)


def _deep_cursor() -> str:
    return base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode()


@pytest.mark.parametrize(("method", "path", "name"), CURSOR_PARAMS, ids=_ids(CURSOR_PARAMS))
@pytest.mark.parametrize(
    "cursor",
    [
        _deep_cursor(),
        base64.urlsafe_b64encode(b"[" * 300 + b"]" * 300).decode(),
        base64.urlsafe_b64encode(json.dumps(["2026-01-01T00:00:00+00:00", "a\x00"]).encode()),
        base64.urlsafe_b64encode(json.dumps(["0001-01-01T00:00:00+01:00", "x"]).encode()),
        base64.urlsafe_b64encode(json.dumps([1, 2]).encode()),
    ],
)
async def test_bad_cursor(client, tenant, ids, method, path, name, cursor) -> None:
    value = cursor if isinstance(cursor, str) else cursor.decode()
    r = await _send(client, tenant, method, _url(path, ids), params={name: value})
    _refused(r, 400)


BAD_BODIES = {
    "nul-value": '{"name": "a\\u0000b", "input": "a\\u0000b"}',
    "nul-key": '{"a\\u0000b": 1}',
    "lone-surrogate": '{"name": "\\ud800", "input": "\\udfff"}',
    "surrogate-key": '{"\\ud800": 1}',
    "huge-number": '{"input": 1e400}',
    "huge-negative": '{"input": -1e400}',
    "nested-nul": '{"metadata": {"k": ["x", "\\u0000"]}}',
}


@pytest.mark.parametrize(("method", "path"), BODY_OPS, ids=_ids(BODY_OPS))
@pytest.mark.parametrize("kind", list(BAD_BODIES))
async def test_unstorable_body(client, tenant, ids, method, path, kind) -> None:
    r = await _send(
        client,
        tenant,
        method,
        _url(path, ids),
        content=BAD_BODIES[kind].encode(),
        headers={"Content-Type": "application/json"},
    )
    _refused(r, 400, 422)


@pytest.mark.parametrize(
    "body",
    [
        {"type": "t", "callbackUrl": "http://127.0.0.1:9/", "input": "a\x00b"},
        {"type": "t", "callbackUrl": "http://127.0.0.1:9/", "metadata": {"a\x00": "b"}},
        {"type": "t", "callbackUrl": "http://127.0.0.1:9/", "metadata": {"a": "\x00"}},
    ],
)
async def test_submit_with_nul_and_an_idempotency_key(client, tenant, body) -> None:
    headers = {**bearer(tenant["apiKey"]), "Idempotency-Key": "k1"}
    _refused(await client.post("/v1/tasks", json=body, headers=headers), 422)


async def test_complete_with_nul_result(client, ids) -> None:
    url = f"/v1/tasks/{ids['task_id']}/complete"
    for body in ({"status": "succeeded", "result": "\x00"}, {"status": "failed", "error": "\x00"}):
        _refused(await client.post(url, json=body, headers=ADMIN), 422)


@pytest.mark.parametrize("task_type", ["t\n", "t\r\n", "\nt", "t\x00"])
async def test_type_is_matched_in_full(client, tenant, task_type) -> None:
    body = {"type": task_type, "callbackUrl": "http://127.0.0.1:9/"}
    _refused(await client.post("/v1/tasks", json=body, headers=bearer(tenant["apiKey"])), 422)


async def test_good_values_still_pass(client, tenant, ids) -> None:
    key = bearer(tenant["apiKey"])
    r = await client.get(
        "/v1/tasks",
        params={"updatedAfter": "2026-01-01T00:00:00.5+05:30", "limit": "5"},
        headers=key,
    )
    assert r.status_code == 200, r.text
    r = await client.get(f"/v1/tasks/{ids['task_id']}", params={"wait": "0.1"}, headers=key)
    assert r.status_code == 200, r.text
    r = await client.post(
        "/v1/tasks",
        json={"type": "t", "callbackUrl": "http://127.0.0.1:9/", "input": {"x": 1.5e300, "é": "✓"}},
        headers=key,
    )
    assert r.status_code == 202, r.text


def test_json_with_a_lone_surrogate_or_infinity_is_unprocessable() -> None:
    with pytest.raises(Unprocessable) as lone:
        guard.check_json({"data": ["ok", "\udfff"]})
    assert lone.value.message == "body.data[1] contains a lone UTF-16 surrogate"
    with pytest.raises(Unprocessable) as inf:
        guard.check_json({"n": float("inf")})
    assert (inf.value.message, inf.value.code) == (
        "body.n is not a finite number",
        "unsupported_value",
    )


def test_json_numbers_beyond_a_double_are_refused_while_parsing() -> None:
    assert json.loads("[1.5]", parse_float=guard.finite_float) == [1.5]
    with pytest.raises(ValueError, match="number 1e400 is out of range"):
        json.loads("[1e400]", parse_float=guard.finite_float)
