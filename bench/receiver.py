"""Benchmark receiver: answers 204, records arrival minus the event's commit timestamp.

Run as a subprocess; on SIGTERM it writes ``{"count", "latencies_ms"}`` to the path given.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from datetime import datetime

from aiohttp import web

TIMESTAMP = re.compile(rb'"timestamp":"([^"]+)"')


def main(port: int, out: str) -> None:
    latencies: list[float] = []
    seen: set[str] = set()

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        now = time.time()
        seen.add(request.headers.get("webhook-id", ""))
        m = TIMESTAMP.search(body)
        if m:
            sent = datetime.fromisoformat(m.group(1).decode().replace("Z", "+00:00"))
            latencies.append((now - sent.timestamp()) * 1000)
        return web.Response(status=204)

    def dump(*_: object) -> None:
        with open(out, "w") as fh:
            json.dump({"count": len(latencies), "unique": len(seen), "latencies_ms": latencies}, fh)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, dump)
    app = web.Application()
    app.router.add_post("/hook", hook)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None,
                handle_signals=False)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
