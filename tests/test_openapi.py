"""/openapi.json describes every route the app serves, and nothing it does not."""

from __future__ import annotations

import re

import pytest
from starlette.routing import Mount, Route, WebSocketRoute

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


FIXED_SEED = 1


@pytest.mark.slow
@pytest.mark.parametrize("seed", ["fixed", "fresh"])
@pytest.mark.parametrize("who", ["tenant", "admin"])
async def test_schemathesis_finds_no_5xx_and_no_schema_break(
    live_api, tmp_path, who: str, seed: str
) -> None:
    """Generated requests from /openapi.json: examples, coverage, fuzzing and the stateful
    phase (which follows the spec's links from a created task or tenant to its routes).

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

    from tests.support import ADMIN_TOKEN

    url, key = live_api
    async with httpx.AsyncClient(base_url=url) as c:
        doc = (await c.get("/openapi.json")).json()
    # Random callback URLs are (rightly) refused, so no task would ever be created and
    # the stateful phase could follow no link from it: offer a receiver it may reach.
    submit = doc["paths"]["/v1/tasks"]["post"]["requestBody"]["content"]["application/json"]
    submit["schema"]["properties"]["callbackUrl"] = {"enum": ["http://127.0.0.1:9/hook"]}
    # A long-poll may rightly hold a request up to 30 s, longer than the fuzzer's read
    # timeout; short waits exercise the same code.
    for param in doc["paths"]["/v1/tasks/{task_id}"]["get"]["parameters"]:
        if param["name"] == "wait":
            param["schema"]["maximum"] = 2
    # A status stream stays open by design (until the task ends, or for ever): the fuzzer
    # would wait on it for good. Its input checks are tested in test_streams_sse.
    for path in ("/v1/events", "/v1/tasks/{task_id}/events"):
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
        "not_a_server_error,response_schema_conformance,content_type_conformance",
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
        "-H",
        f"Authorization: Bearer {key if who == 'tenant' else ADMIN_TOKEN}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    report = out.decode(errors="replace")
    assert proc.returncode == 0, f"seed {number} ({who}): st run --seed {number}\n{report[-6000:]}"
    assert " passed" in report and "generated" in report
    assert "Stateful" in report, report[-3000:]
