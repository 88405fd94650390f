"""The cluster's webhook receiver: counts each webhook-id and which host sent it, answers 204.

    python -m bench._cluster_receiver HOST PORT [--delay-s S]

``GET /stats`` answers ``{"requests", "unique", "by_source": {address: requests}}``;
``GET /ids`` adds ``{"ids": {webhook-id: requests}}``. The sender is told apart by the
request's source address, which is its host's address on the edge network. With
``--delay-s`` each answer waits that long, so deliveries stay in flight a while.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter

from aiohttp import web


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("--delay-s", type=float, default=0.0)
    args = p.parse_args()
    ids: Counter[str] = Counter()
    by_source: Counter[str] = Counter()

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        # Counted on arrival: a receiver acts on what it is sent, whether or not its
        # sender is still there to read the answer.
        ids[request.headers.get("webhook-id", "")] += 1
        by_source[request.remote or "?"] += 1
        if args.delay_s:
            await asyncio.sleep(args.delay_s)
        return web.Response(status=204)

    def stats() -> dict[str, object]:
        return {"requests": sum(ids.values()), "unique": len(ids), "by_source": by_source}

    async def get_stats(request: web.Request) -> web.Response:
        return web.json_response(stats())

    async def get_ids(request: web.Request) -> web.Response:
        return web.json_response({**stats(), "ids": ids})

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_get("/stats", get_stats)
    app.router.add_get("/ids", get_ids)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
