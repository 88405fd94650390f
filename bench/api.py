"""API throughput: ``POST /v1/tasks`` and ``GET /v1/tasks/{id}`` against a trivial route.

``hookrelay api`` (one uvicorn worker) and a one-route Starlette app with the same
uvicorn settings run side by side; a load generator process drives each in turn
over loopback keep-alive connections. Prints req/s, p50 and p99, and the ratio.

    python -m bench api [--seconds 8] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench.common import fresh_database, record, server_dsn
from tests.harness.procs import ROOT, free_port, hookrelay, master_key, service_env, wait_for_port

SUBMIT = {"type": "bench", "callbackUrl": "http://127.0.0.1:9/hook", "input": {"n": 1}}


def load(
    url: str,
    *,
    seconds: float,
    concurrency: int,
    method: str = "GET",
    body: str | None = None,
    headers: dict[str, str] | None = None,
    paths: str | None = None,
    auths: str | None = None,
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "bench._loadgen",
        url,
        "--method",
        method,
        "--seconds",
        str(seconds),
        "--concurrency",
        str(concurrency),
    ]
    if body is not None:
        cmd += ["--body", body]
    for k, v in (headers or {}).items():
        cmd += ["--header", f"{k}:{v}"]
    if paths:
        cmd += ["--paths", paths]
    if auths:
        cmd += ["--auths", auths]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    result: dict[str, Any] = json.loads(out)
    return result


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--concurrency", type=int, default=32)
    args = p.parse_args()
    dsn = await fresh_database(server_dsn())
    api_port, trivial_port = free_port(), free_port()
    env = service_env(dsn, master_key(), host="127.0.0.1", port=api_port)
    api = subprocess.Popen(hookrelay("api"), env=env, cwd=ROOT)
    trivial = subprocess.Popen(
        [sys.executable, "-m", "bench._trivial_app", str(trivial_port)], cwd=ROOT
    )
    try:
        wait_for_port(api_port, api)
        wait_for_port(trivial_port, trivial)
        base = f"http://127.0.0.1:{api_port}"
        async with httpx.AsyncClient(base_url=base) as c:
            r = await c.post(
                "/v1/admin/tenants",
                json={"name": "bench"},
                headers={"Authorization": "Bearer bench"},
            )
            r.raise_for_status()
            key = r.json()["apiKey"]
            auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
            ids = [
                (await c.post("/v1/tasks", json=SUBMIT, headers=auth)).json()["id"]
                for _ in range(500)
            ]
        paths = Path(tempfile.mkdtemp()) / "paths.txt"
        paths.write_text("".join(f"/{i}\n" for i in ids))
        common = {"seconds": args.seconds, "concurrency": args.concurrency}
        trivial_url = f"http://127.0.0.1:{trivial_port}/hello"
        rows = {
            "GET trivial route": load(trivial_url, **common),
            "GET /v1/tasks/{id}": load(
                f"{base}/v1/tasks", headers=auth, paths=str(paths), **common
            ),
            "POST trivial route": load(
                trivial_url,
                method="POST",
                body=json.dumps(SUBMIT),
                headers={"Content-Type": "application/json"},
                **common,
            ),
            "POST /v1/tasks": load(
                f"{base}/v1/tasks", method="POST", body=json.dumps(SUBMIT), headers=auth, **common
            ),
        }
    finally:
        for proc in (api, trivial):
            proc.terminate()
            proc.wait(30)
    lines = ["| route | req/s | p50 ms | p99 ms | non-2xx | errors |", "|---|---|---|---|---|---|"]
    for name, row in rows.items():
        bad = sum(n for s, n in row["statuses"].items() if not str(s).startswith("2"))
        lines.append(
            f"| {name} | {row['rps']:,.0f} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} "
            f"| {bad} | {row['errors']:.0f} |"
        )
    get_ratio = rows["GET /v1/tasks/{id}"]["rps"] / rows["GET trivial route"]["rps"]
    post_ratio = rows["POST /v1/tasks"]["rps"] / rows["POST trivial route"]["rps"]
    lines += [
        "",
        f"ratio GET = {get_ratio:.2f} of the trivial route; "
        f"ratio POST = {post_ratio:.2f} of the trivial route",
        "",
    ]
    table = "\n".join(lines)
    print(table)
    record(
        "api: requests per second",
        f"python -m bench api --seconds {args.seconds:g} --concurrency {args.concurrency}",
        table,
    )
