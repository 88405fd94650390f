"""The API benchmark's baseline: one trivial Starlette route, served the way hookrelay serves.

python -m bench._trivial_app PORT
"""

from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hookrelay.service.server.event_loop import run, uvicorn_config


async def hello(request: Request) -> JSONResponse:
    if request.method == "POST":
        await request.body()
    return JSONResponse({"ok": True})


app = Starlette(routes=[Route("/hello", hello, methods=["GET", "POST"])])

if __name__ == "__main__":
    # The same uvicorn settings and event loop as `hookrelay api`.
    config = uvicorn_config(app, host="127.0.0.1", port=int(sys.argv[1]))
    run(uvicorn.Server(config).serve())
