"""/openapi.json describes every route the app serves, and nothing it does not."""

from __future__ import annotations

import re

import pytest
from starlette.routing import Route

pytestmark = pytest.mark.anyio


async def test_every_route_is_described(client) -> None:  # type: ignore[no-untyped-def]
    r = await client.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"] == "3.1.0" and doc["components"]["schemas"]["Error"]
    served = set()
    for route in client._transport.app.routes:  # type: ignore[attr-defined]
        assert isinstance(route, Route)
        for method in route.methods or ():
            if method != "HEAD":
                served.add((route.path, method.lower()))
    described = {(path, m) for path, ops in doc["paths"].items() for m in ops}
    assert served == described
    for path, ops in doc["paths"].items():
        for name in re.findall(r"{(\w+)}", path):
            for op in ops.values():
                assert any(p["name"] == name and p["in"] == "path"
                           for p in op.get("parameters", [])), (path, name)
