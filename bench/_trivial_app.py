"""The API benchmarks' baseline: trivial Starlette routes, served the way hookrelay serves.

``/hello`` reads the body and answers ``{"ok": true}``; ``/task`` parses a submit's
JSON body and answers a task of the same shape as ``POST /v1/tasks`` does (202),
with no database, no validation and no auth: what any Starlette app pays per
request, the floor the API's CPU per request is compared with (bench quick).

python -m bench._trivial_app PORT
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

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


async def task(request: Request) -> JSONResponse:
    body = await request.json()
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    resource = {
        "id": "task_" + "0" * 26,
        "type": body.get("type"),
        "status": "queued",
        "input": body.get("input"),
        "result": None,
        "error": None,
        "callbackUrl": body.get("callbackUrl"),
        "metadata": body.get("metadata"),
        "createdAt": now,
        "updatedAt": now,
        "completedAt": None,
        "timeoutAt": None,
        "heartbeatTimeoutSeconds": None,
        "onTimeout": None,
        "progress": None,
        "version": 1,
        "delivery": {
            "eventId": None,
            "status": "none",
            "attempts": 0,
            "lastAttemptAt": None,
            "lastStatusCode": None,
            "lastError": None,
            "nextAttemptAt": None,
            "deliveredAt": None,
        },
    }
    return JSONResponse(resource, status_code=202)


app = Starlette(
    routes=[
        Route("/hello", hello, methods=["GET", "POST"]),
        Route("/task", task, methods=["POST"]),
    ]
)

if __name__ == "__main__":
    # The same uvicorn settings and event loop as `hookrelay api`.
    config = uvicorn_config(app, host="127.0.0.1", port=int(sys.argv[1]))
    run(uvicorn.Server(config).serve())
