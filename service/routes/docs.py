"""``/docs``: the API reference, Swagger UI rendering ``/openapi.json``, served from the package;
and ``/docs/follow``, a page that follows one task live over ``GET /v1/ws``.

The Swagger UI build is vendored under ``service/api/static/swagger-ui`` (Apache-2.0, its
LICENSE and NOTICE beside it), so the page works offline and loads nothing from a CDN.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import Route

from hookrelay.service.api.errors import NotFound

STATIC = Path(__file__).resolve().parent.parent / "static"
CSS, JS, TEXT = (f"text/{kind}; charset=utf-8" for kind in ("css", "javascript", "plain"))
# Only these files are served: the name comes from the URL, so no path is built from it.
SERVED = {
    "swagger-ui.css": ("swagger-ui", CSS),
    "swagger-ui-bundle.js": ("swagger-ui", JS),
    "init.js": ("swagger-ui", JS),
    "LICENSE": ("swagger-ui", TEXT),
    "swagger-ui-bundle.js.LICENSE.txt": ("swagger-ui", TEXT),
    "NOTICE": ("swagger-ui", TEXT),
    "follow.js": ("follow", JS),
    "follow.css": ("follow", CSS),
}
# The pages run no inline script and reach nothing but this server ('self' covers
# ws: and wss: to this host, CSP Level 3).
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'"
)
FOLLOW_POLICY = POLICY.replace(" 'unsafe-inline'", "")
PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>hookrelay API</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>
"""


FOLLOW = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<title>Follow a task - hookrelay</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/docs/follow.css">
</head>
<body>
<h1>Follow a task</h1>
<!-- No input has a name: even without script, submitting puts nothing in the URL. -->
<form id="follow" autocomplete="off">
<label for="key">API key</label>
<input id="key" type="password" required>
<label for="task">Task id</label>
<input id="task" required pattern="task_[a-z0-9]+" placeholder="task_...">
<button type="submit">Follow</button>
</form>
<p id="connection" role="status"></p>
<p id="problem" role="alert"></p>
<section id="panel" hidden>
<dl>
<dt>Task</dt><dd id="task-id"></dd>
<dt>Status</dt><dd id="status"></dd>
<dt>Progress</dt>
<dd><progress id="bar" max="100" value="0"></progress> <span id="percent"></span></dd>
<dt>Message</dt><dd id="message"></dd>
<dt>Version</dt><dd id="version"></dd>
</dl>
<div id="result-row" hidden><h2>Result</h2><pre id="result"></pre></div>
</section>
<script src="/docs/follow.js"></script>
</body>
</html>
"""


async def page(request: Request) -> Response:
    return HTMLResponse(PAGE, headers={"Content-Security-Policy": POLICY})


async def follow(request: Request) -> Response:
    """The task-following page: the API key stays in a form field and the socket's first
    message, never in the URL (a task id may come in the fragment)."""
    return HTMLResponse(FOLLOW, headers={"Content-Security-Policy": FOLLOW_POLICY})


async def asset(request: Request) -> Response:
    name = request.path_params["asset"]
    found = SERVED.get(name)
    if found is None:
        raise NotFound(f"no such file under /docs: {name}")
    folder, media_type = found
    return FileResponse(
        STATIC / folder / name,
        media_type=media_type,
        headers={"Cache-Control": "public, max-age=86400"},
    )


routes = [
    Route("/docs", page, methods=["GET"]),
    Route("/docs/follow", follow, methods=["GET"]),
    Route("/docs/{asset}", asset, methods=["GET"]),
]
