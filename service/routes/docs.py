"""``/docs``: the API reference, Swagger UI rendering ``/openapi.json``, served from the package.

The Swagger UI build is vendored under ``service/static/swagger-ui`` (Apache-2.0, its
LICENSE and NOTICE beside it), so the page works offline and loads nothing from a CDN.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import Route

from ..errors import NotFound

ASSETS = Path(__file__).resolve().parent.parent / "static" / "swagger-ui"
# Only these files are served: the name comes from the URL, so no path is built from it.
SERVED = {
    "swagger-ui.css": "text/css; charset=utf-8",
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "init.js": "text/javascript; charset=utf-8",
    "LICENSE": "text/plain; charset=utf-8",
    "swagger-ui-bundle.js.LICENSE.txt": "text/plain; charset=utf-8",
    "NOTICE": "text/plain; charset=utf-8",
}
# The page runs no inline script and reaches nothing but this server.
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'"
)
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


async def page(request: Request) -> Response:
    return HTMLResponse(PAGE, headers={"Content-Security-Policy": POLICY})


async def asset(request: Request) -> Response:
    name = request.path_params["asset"]
    media_type = SERVED.get(name)
    if media_type is None:
        raise NotFound(f"no such file under /docs: {name}")
    return FileResponse(
        ASSETS / name,
        media_type=media_type,
        headers={"Cache-Control": "public, max-age=86400"},
    )


routes = [
    Route("/docs", page, methods=["GET"]),
    Route("/docs/{asset}", asset, methods=["GET"]),
]
