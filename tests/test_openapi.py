"""/openapi.json describes every route the app serves, and nothing it does not."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import re
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any, get_args, get_type_hints

import httpx
import jsonschema_rs
import pytest
from starlette.routing import Mount, Route, WebSocketRoute

from hookrelay.outbox.models import TaskStatus
from tests.harness.procs import uncovered
from tests.support import ADMIN, ADMIN_TOKEN, bearer

pytestmark = pytest.mark.anyio


async def test_every_route_is_described(client) -> None:
    r = await client.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"] == "3.1.0" and doc["components"]["schemas"]["Error"]
    served = set()
    for route in client._transport.app.routes:
        if isinstance(route, Mount):  # the HTML console: only its entry page is API-like
            served.add((route.path, "get"))
            continue
        if isinstance(route, WebSocketRoute):  # an upgraded GET, described as one
            served.add((route.path, "get"))
            continue
        assert isinstance(route, Route)
        for method in route.methods or ():
            if method != "HEAD":
                served.add((route.path, method.lower()))
    described = {(path, m) for path, ops in doc["paths"].items() for m in ops}
    assert served == described
    for path, ops in doc["paths"].items():
        for name in re.findall(r"{(\w+)}", path):
            for op in ops.values():
                assert any(
                    p["name"] == name and p["in"] == "path" for p in op.get("parameters", [])
                ), (path, name)


async def test_version_is_the_installed_distribution(client) -> None:
    doc = (await client.get("/openapi.json")).json()
    assert doc["info"]["version"] == version("hookrelay-server")


async def test_status_parameter_is_an_enum_of_the_statuses(client) -> None:
    doc = (await client.get("/openapi.json")).json()
    (param,) = [p for p in doc["paths"]["/v1/tasks"]["get"]["parameters"] if p["name"] == "status"]
    assert set(param["schema"]["enum"]) == set(get_args(TaskStatus))


def _body(doc: dict[str, Any], path: str, method: str = "post") -> dict[str, Any]:
    """The component a route's request body refers to."""
    content = doc["paths"][path][method]["requestBody"]["content"]["application/json"]
    name = content["schema"]["$ref"].removeprefix("#/components/schemas/")
    return doc["components"]["schemas"][name]  # type: ignore[no-any-return]


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its component references inlined, for a validator."""
    return {**schema, "components": doc["components"]}


async def test_schema_and_server_agree_on_submit(client, tenant) -> None:
    """The type's character pattern and the 16 KiB metadata cap are in the schema, and
    the server accepts what the schema accepts and refuses what it refuses."""
    doc = (await client.get("/openapi.json")).json()
    schema = _body(doc, "/v1/tasks")
    validator = jsonschema_rs.validator_for(_resolve(doc, schema))
    assert schema["properties"]["type"]["pattern"] == "^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$"
    metadata = schema["properties"]["metadata"]["anyOf"][0]
    assert metadata["x-max-json-bytes"] == 16_384 and "16384 bytes" in metadata["description"]
    hook = "http://127.0.0.1:9/hook"
    room = 16_384 - len(b'{"k":""}')
    cases: list[dict[str, Any]] = [
        {"type": "a"},
        {"type": "render.pdf/v2:x-1_"},
        {"type": "x" * 100},
        {"type": "-x"},
        {"type": "x" * 101},
        {"type": "a b"},
        {"type": "t\n"},
        {"type": "t", "metadata": {"k": "v" * room}},
        {"type": "t", "heartbeatTimeoutSeconds": 1, "timeoutSeconds": 0.5},
        {"type": "t", "timeoutSeconds": 0},
        {"type": "t", "onTimeout": {"result": 1, "error": None}},
        {"type": "t", "onTimeout": {"other": 1}},
    ]
    for case in cases:
        body = {"callbackUrl": hook, **case}
        r = await client.post("/v1/tasks", json=body, headers=bearer(tenant["apiKey"]))
        assert r.status_code == (202 if validator.is_valid(body) else 422), (case, r.text)
    # The one rule a schema cannot hold is there in words, and holds.
    too_big = {"type": "t", "callbackUrl": hook, "metadata": {"k": "v" * (room + 1)}}
    r = await client.post("/v1/tasks", json=too_big, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 422 and r.json()["error"]["message"].startswith(
        "metadata: exceeds 16384 bytes"
    )


async def test_schema_and_server_agree_on_tenant_names(client) -> None:
    doc = (await client.get("/openapi.json")).json()
    validator = jsonschema_rs.validator_for(_resolve(doc, _body(doc, "/v1/admin/tenants")))
    for name in ["a", " a ", "\u3000a", "  ", "\t", "\u3000", "\x1c", "\ufeff", ""]:
        r = await client.post("/v1/admin/tenants", json={"name": name}, headers=ADMIN)
        assert r.status_code == (201 if validator.is_valid({"name": name}) else 422), repr(name)
        if r.status_code == 201:
            assert r.json()["name"] == name.strip()


async def test_errors_name_the_field_path(client, tenant) -> None:
    body: dict[str, Any] = {
        "type": "t",
        "callbackUrl": "http://127.0.0.1:9/",
        "onTimeout": {"result": 1, "x": 2},
    }
    r = await client.post("/v1/tasks", json=body, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    assert r.json()["error"]["message"] == "unknown field(s): onTimeout.x"
    body = {"type": "t", "callbackUrl": "http://127.0.0.1:9/", "timeoutSeconds": -1}
    r = await client.post("/v1/tasks", json=body, headers=bearer(tenant["apiKey"]))
    assert r.json()["error"]["message"] == "timeoutSeconds: Expected `float` > 0.0"
    r = await client.post("/v1/tasks", json={"callbackUrl": "x"}, headers=bearer(tenant["apiKey"]))
    assert r.json()["error"]["message"] == "type is required"
    r = await client.get("/v1/tasks", params={"limit": "0"}, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 400 and r.json()["error"]["message"] == "limit: Expected `int` >= 1"


async def test_rotate_secret_answer_is_described(client, tenant) -> None:
    """It was documented as any object; its four fields are now declared and required."""
    doc = (await client.get("/openapi.json")).json()
    response = doc["paths"]["/v1/admin/tenants/{tenant_id}/rotate-secret"]["post"]["responses"]
    schema = response["200"]["content"]["application/json"]["schema"]
    r = await client.post(f"/v1/admin/tenants/{tenant['id']}/rotate-secret", headers=ADMIN)
    assert r.status_code == 200
    component = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    assert (
        set(component["required"])
        == set(r.json())
        == {
            "id",
            "signingSecret",
            "publicKey",
            "previousSecretsExpireInSeconds",
        }
    )
    assert jsonschema_rs.validator_for(_resolve(doc, schema)).is_valid(r.json())


async def test_answers_match_their_schemas(client, tenant) -> None:
    """Answers of the main routes against the schemas the document gives them (the
    fuzzer checks every route too, in the slow test below)."""
    doc = (await client.get("/openapi.json")).json()
    key = bearer(tenant["apiKey"])
    r = await client.post(
        "/v1/tasks", json={"type": "t", "callbackUrl": "http://127.0.0.1:9/"}, headers=key
    )
    tid = r.json()["id"]
    await client.post(f"/v1/tasks/{tid}/start", headers=ADMIN)
    await client.post(f"/v1/tasks/{tid}/progress", json={"percent": 5}, headers=ADMIN)
    calls = [
        ("get", "/v1/tasks/{task_id}", f"/v1/tasks/{tid}", key),
        ("get", "/v1/tasks", "/v1/tasks", key),
        ("get", "/v1/tasks/{task_id}/deliveries", f"/v1/tasks/{tid}/deliveries", key),
        ("get", "/v1/signing-keys", "/v1/signing-keys", key),
        ("get", "/v1/admin/tenants", "/v1/admin/tenants", ADMIN),
        ("get", "/v1/admin/destinations", "/v1/admin/destinations", ADMIN),
        ("get", "/v1/admin/dead-letters", "/v1/admin/dead-letters", ADMIN),
        ("get", "/healthz", "/healthz", {}),
    ]
    for method, path, url, headers in calls:
        r = await client.request(method.upper(), url, headers=headers)
        content = doc["paths"][path][method]["responses"][str(r.status_code)]["content"]
        schema = content["application/json"]["schema"]
        assert jsonschema_rs.validator_for(_resolve(doc, schema)).is_valid(r.json()), (url, r.text)


async def test_every_operation_is_named_and_every_body_a_component(client) -> None:
    """What client generators name things by: an operationId (unique) and a declared tag
    on every operation; every request body a reference to one component, and every
    component referred to (none unused, none written twice)."""
    doc = (await client.get("/openapi.json")).json()
    declared = [t["name"] for t in doc["tags"]]
    ops = [op for ops in doc["paths"].values() for op in ops.values()]
    ids = [op["operationId"] for op in ops]
    assert len(ids) == len(set(ids)) == len(ops)
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]*)*", i) for i in ids), ids
    assert all(len(op["tags"]) == 1 and op["tags"][0] in declared for op in ops)
    assert {op["tags"][0] for op in ops} == set(declared)
    refs = {"#/components/schemas/" + name for name in doc["components"]["schemas"]}
    for op in ops:
        if "requestBody" in op:
            (content,) = op["requestBody"]["content"].values()
            assert set(content["schema"]) == {"$ref"} and content["schema"]["$ref"] in refs
    text = json.dumps(doc["paths"]) + json.dumps(doc["components"]["schemas"])
    assert {r for r in refs if json.dumps(r) not in text} == set()


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower().replace(" ", "_")


async def test_a_generated_client_submits_completes_and_lists(live_api, tmp_path) -> None:
    """openapi-python-client, run on the served document, warns of nothing; its models
    are the components (one per body, not a second one named after the operation), its
    calls are named by operationId and grouped by tag; and that client drives a task
    through a live API: submitted, completed, listed."""
    url, key = live_api
    generator = Path(sys.executable).with_name("openapi-python-client")
    package = tmp_path / "generated" / "hookrelay_generated"
    env = uncovered()
    # Its post-generation hooks run ruff, from this environment.
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    proc = await asyncio.create_subprocess_exec(
        str(generator),
        "generate",
        "--url",
        f"{url}/openapi.json",
        "--meta",
        "none",
        "--output-path",
        str(package),
        "--fail-on-warning",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    out, _ = await proc.communicate()
    report = out.decode(errors="replace")
    assert proc.returncode == 0, report
    # Nothing but its progress line: no warning about the document, no skipped hook.
    assert report.strip() == f"Generating {package}", report

    async with httpx.AsyncClient(base_url=url) as c:
        doc = (await c.get("/openapi.json")).json()
    sys.path.insert(0, str(package.parent))
    try:
        models = importlib.import_module("hookrelay_generated.models")
        generated = set(models.__all__)
        components = set(doc["components"]["schemas"])
        assert components <= generated
        ops = {
            (op["tags"][0], op["operationId"]): op
            for ops in doc["paths"].values()
            for op in ops.values()
        }
        for (tag, op_id), op in ops.items():
            call = importlib.import_module(f"hookrelay_generated.api.{_snake(tag)}.{_snake(op_id)}")
            if "requestBody" in op:
                ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                body = getattr(models, ref.rsplit("/", 1)[1])
                hint = get_type_hints(call.asyncio_detailed)["body"]
                assert body is hint or body in get_args(hint), (op_id, hint)
        pascal = {op_id[0].upper() + op_id[1:] for _, op_id in ops}
        doubled = {m for m in generated for p in pascal for c in components if m == p + c}
        assert doubled == set()

        client_package = importlib.import_module("hookrelay_generated")
        tasks = importlib.import_module("hookrelay_generated.api.tasks")
        for name in ("submit_task", "complete_task", "list_tasks"):
            importlib.import_module(f"hookrelay_generated.api.tasks.{name}")
        tenant = client_package.AuthenticatedClient(base_url=url, token=key)
        admin = client_package.AuthenticatedClient(base_url=url, token=ADMIN_TOKEN)
        async with tenant, admin:
            submitted = await tasks.submit_task.asyncio(
                client=tenant,
                body=models.SubmitBody(type_="render.pdf", callback_url="http://127.0.0.1:9/hook"),
            )
            assert isinstance(submitted, models.TaskResource), submitted
            assert submitted.status == models.TaskResourceStatus.QUEUED
            done = await tasks.complete_task.asyncio(
                submitted.id,
                client=admin,
                body=models.CompleteBody(
                    status=models.CompleteBodyStatus.SUCCEEDED, result={"pages": 3}
                ),
            )
            assert isinstance(done, models.TaskResource), done
            assert done.status == models.TaskResourceStatus.SUCCEEDED
            page = await tasks.list_tasks.asyncio(client=tenant)
            assert isinstance(page, models.TaskPage), page
            [listed] = page.data
            assert (listed.id, listed.status) == (submitted.id, models.TaskResourceStatus.SUCCEEDED)
            assert listed.result == {"pages": 3}
    finally:
        sys.path.remove(str(package.parent))
        for name in [m for m in sys.modules if m.split(".")[0] == "hookrelay_generated"]:
            del sys.modules[name]


FIXED_SEED = 1


def only_valid_data(doc: dict[str, Any], receiver: str) -> None:
    """``doc`` narrowed where a schema cannot say what the server accepts, so that a
    request valid by it must be accepted (schemathesis' positive_data_acceptance)."""
    # A callback URL must be reachable under the SSRF rules: a check of its host's
    # addresses when submitted (test_ssrf, test_callback_url), not a shape.
    # So must a notification URL, checked the same way.
    for body in ("SubmitBody", "PingBody"):
        doc["components"]["schemas"][body]["properties"]["callbackUrl"] = {"enum": [receiver]}
    # Callback headers: names distinct ignoring case and 4 KiB in all are the server's
    # checks (test_callback_headers has one refusal per rule), not shapes.
    headers = {
        "type": "object",
        "maxProperties": 1,
        "propertyNames": {"enum": ["x-api-key"]},
        "additionalProperties": {"type": "string", "pattern": "^[a-z0-9]{1,64}$"},
    }
    doc["components"]["schemas"]["SubmitBody"]["properties"]["callbackHeaders"] = headers
    doc["components"]["schemas"]["NotificationsBody"]["properties"]["url"] = {"enum": [receiver]}
    for path, ops in doc["paths"].items():
        for op in ops.values():
            # A cursor is opaque: only a nextCursor the server gave is one (test_guard has
            # the refusals of others). A reused Idempotency-Key with another body is a 422
            # by contract (test_routes_tasks), whatever the body.
            op["parameters"] = [
                p
                for p in op.get("parameters", [])
                if p["name"] not in {"cursor", "Idempotency-Key"}
            ]
            if not op["parameters"]:
                del op["parameters"]
            # A long-poll may rightly hold a request up to 30 s, longer than the fuzzer's
            # read timeout; short waits exercise the same code.
            for param in op.get("parameters", []):
                if path == "/v1/tasks/{task_id}" and param["name"] == "wait":
                    param["schema"]["maximum"] = 2


@pytest.mark.slow
@pytest.mark.parametrize("seed", ["fixed", "fresh"])
@pytest.mark.parametrize("who", ["tenant", "admin"])
async def test_schemathesis_finds_no_5xx_and_no_schema_break(
    live_api, tmp_path, who: str, seed: str
) -> None:
    """Generated requests from /openapi.json: examples, coverage, fuzzing and the stateful
    phase (which follows the spec's links from a created task or tenant to its routes).
    No 5xx, answers as documented, and every request valid by the schema accepted
    (positive_data_acceptance: never a 400 or 422 for it).

    Run twice: with a fixed seed, reproducible in CI, and with a fresh one that widens the
    search over time; a failure prints the seed to rerun it with (``st run --seed N``).
    """
    import asyncio
    import json
    import random
    import shutil
    import sys
    from pathlib import Path

    import httpx

    from tests.harness.procs import uncovered
    from tests.support import ADMIN_TOKEN

    url, key = live_api
    async with httpx.AsyncClient(base_url=url) as c:
        doc = (await c.get("/openapi.json")).json()
    # Random callback URLs are (rightly) refused, so no task would ever be created and
    # the stateful phase could follow no link from it: offer a receiver it may reach.
    only_valid_data(doc, "http://127.0.0.1:9/hook")
    # A status stream stays open by design (until the task ends, or for ever): the fuzzer
    # would wait on it for good. Its input checks are tested in test_streams_sse. The
    # WebSocket needs a handshake an HTTP fuzzer does not make (test_ws).
    for path in ("/v1/events", "/v1/tasks/{task_id}/events", "/v1/ws"):
        del doc["paths"][path]
    schema = tmp_path / "openapi.json"
    schema.write_text(json.dumps(doc))
    number = FIXED_SEED if seed == "fixed" else random.SystemRandom().randrange(1, 2**31)
    st = shutil.which("st") or str(Path(sys.executable).with_name("st"))
    proc = await asyncio.create_subprocess_exec(
        st,
        "run",
        str(schema),
        "--url",
        url,
        "--checks",
        "not_a_server_error,response_schema_conformance,content_type_conformance,"
        "positive_data_acceptance",
        "--max-examples",
        "15",
        "--seed",
        str(number),
        "--generation-database",
        "none",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--workers",
        "1",
        # PostgreSQL cannot store a NUL: every body and parameter refuses one (the API's
        # description says so; test_guard tries each), which a schema cannot express.
        "--generation-allow-x00",
        "false",
        "-H",
        f"Authorization: Bearer {key if who == 'tenant' else ADMIN_TOKEN}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=uncovered(),
    )
    out, _ = await proc.communicate()
    report = out.decode(errors="replace")
    assert proc.returncode == 0, f"seed {number} ({who}): st run --seed {number}\n{report[-6000:]}"
    assert " passed" in report and "generated" in report
    assert "Stateful" in report, report[-3000:]
