"""/openapi.json describes every route the app serves, and nothing it does not."""

from __future__ import annotations

import re

import pytest
from starlette.routing import Mount, Route

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


@pytest.mark.slow
@pytest.mark.parametrize("who", ["tenant", "admin"])
async def test_schemathesis_finds_no_5xx_and_no_schema_break(live_api, who: str) -> None:
    """Generated requests from /openapi.json, positive and negative, bounded and seeded."""
    import asyncio
    import shutil
    import sys
    from pathlib import Path

    from .support import ADMIN_TOKEN

    url, key = live_api
    st = shutil.which("st") or str(Path(sys.executable).with_name("st"))
    proc = await asyncio.create_subprocess_exec(
        st,
        "run",
        f"{url}/openapi.json",
        "--checks",
        "not_a_server_error,response_schema_conformance,content_type_conformance",
        "--max-examples",
        "15",
        "--seed",
        "1",
        "--generation-database",
        "none",
        "--phases",
        "coverage,fuzzing",
        "--workers",
        "1",
        "-H",
        f"Authorization: Bearer {key if who == 'tenant' else ADMIN_TOKEN}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    report = out.decode(errors="replace")
    assert proc.returncode == 0, report[-6000:]
    assert " passed" in report and "generated" in report
