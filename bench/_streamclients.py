"""Helper process of ``bench/streams.py``: many clients of one kind following one task each.

    python -m bench._streamclients KIND URL FOLLOWS_JSON

KIND is ``sse`` (GET /v1/tasks/{id}/events), ``ws`` (GET /v1/ws, subscribed to the
task) or ``lp`` (GET /v1/tasks/{id}?wait=30 with If-None-Match, re-asked after each
change). FOLLOWS_JSON lists ``[api key, task id]`` pairs, one client each. Prints
``connected N`` once every client is following (or failed), then waits for a line on
stdin and prints one JSON object: ``{"seen": {marker: [receive times]}, "errors": n}``.
A change's marker is its progress message; times are ``time.time()`` (same clock as
the driver's, one machine).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import defaultdict
from typing import Any

import aiohttp

seen: defaultdict[str, list[float]] = defaultdict(list)
errors: list[str] = []


def note(task: dict[str, Any]) -> None:
    progress = task.get("progress") or {}
    marker = progress.get("message")
    if marker:
        seen[marker].append(time.time())


async def sse(http: aiohttp.ClientSession, url: str, key: str, task_id: str, up: Any) -> None:
    headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
    async with http.get(f"{url}/v1/tasks/{task_id}/events", headers=headers) as r:
        if r.status != 200:
            raise RuntimeError(f"SSE {r.status}: {(await r.text())[:200]}")
        up()
        async for line in r.content:
            if line.startswith(b"data:"):
                note(json.loads(line[5:]))


async def ws(http: aiohttp.ClientSession, url: str, key: str, task_id: str, up: Any) -> None:
    # Offers permessage-deflate, as browsers do.
    async with http.ws_connect(f"{url}/v1/ws", autoping=True, compress=15) as sock:
        await sock.send_str(json.dumps({"type": "auth", "token": key}))
        await sock.send_str(json.dumps({"type": "subscribe", "taskIds": [task_id]}))
        async for frame in sock:
            message = json.loads(frame.data)
            if message["type"] == "task":
                note(message["task"])
            elif message["type"] == "subscribed":
                up()
            elif message["type"] == "error":
                raise RuntimeError(f"WS error: {message}")
        raise RuntimeError(f"WS closed: {sock.close_code}")


async def lp(http: aiohttp.ClientSession, url: str, key: str, task_id: str, up: Any) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    async with http.get(f"{url}/v1/tasks/{task_id}", headers=headers) as r:
        etag = r.headers["ETag"]
    up()
    while True:
        async with http.get(
            f"{url}/v1/tasks/{task_id}?wait=30", headers={**headers, "If-None-Match": etag}
        ) as r:
            if r.status == 200:
                etag = r.headers["ETag"]
                note(await r.json())
            elif r.status != 304:
                raise RuntimeError(f"long-poll {r.status}")


async def main() -> None:
    kind, url, follows_path = sys.argv[1:4]
    with open(follows_path) as fh:
        follows = json.load(fh)
    client = {"sse": sse, "ws": ws, "lp": lp}[kind]
    ready = asyncio.Event()
    count = {"up": 0, "done": 0}

    def up() -> None:
        count["up"] += 1
        if count["up"] + count["done"] >= len(follows):
            ready.set()

    async def one(key: str, task_id: str) -> None:
        try:
            await client(http, url, key, task_id, up)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - counted and reported, the rest go on
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
        count["done"] += 1
        if count["up"] + count["done"] >= len(follows):
            ready.set()

    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        tasks = []
        for i, (key, task_id) in enumerate(follows):
            tasks.append(asyncio.create_task(one(key, task_id)))
            if i % 100 == 99:  # a listen backlog's worth at a time
                await asyncio.sleep(0.05)
        await ready.wait()
        print(f"connected {count['up']}", flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.readline)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps({"seen": seen, "errors": len(errors), "sample": errors[:5]}), flush=True)


if __name__ == "__main__":
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
