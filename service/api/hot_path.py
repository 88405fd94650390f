"""The hot routes' own way in: submit, complete and a task's status, past Starlette's router.

These three are most of what a busy API answers. Through Starlette, each passed the
router's regular expressions over the route table (``/v1/tasks/{id}/complete`` is
matched after some twenty others), the exception middleware and the route's wrapper,
each wrapping ``send`` again, and a ``Response`` that re-encodes its headers when sent.
:class:`HotPath` picks them out with a few string comparisons, calls the same endpoint
with the same ``Request``, renders a failure with the same handlers
(:func:`hookrelay.service.api.errors.render`), and sends the answer itself.

Nothing else changes: the request guard and tracing run before it (it sits inside
them), the three routes stay in the route table (where a wrong method gets its 405, and
tracing and the OpenAPI document find their templates), and what a client sees is the
same byte for byte (tests/test_hot_path.py compares both ways in).
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from hookrelay.service.api.errors import render

__all__ = ["HOT_ROUTES", "HotPath"]

# (method, template) of the routes taken past the router.
HOT_ROUTES = (
    ("POST", "/v1/tasks"),
    ("GET", "/v1/tasks/{task_id}"),
    ("POST", "/v1/tasks/{task_id}/complete"),
)
_TASKS = "/v1/tasks/"
_COMPLETE = "/complete"


class HotPath:
    """ASGI middleware serving :data:`HOT_ROUTES` from ``routes``; the rest goes on to ``app``."""

    def __init__(self, app: ASGIApp, routes: Sequence[Route]) -> None:
        self.app = app
        found = {(m, r.path): r for r in routes for m in r.methods or ()}
        self._submit, self._show, self._complete = (found[hot] for hot in HOT_ROUTES)

    def _match(self, method: str, path: str) -> tuple[Route | None, str | None]:
        """The hot route ``path`` asks for, and its task id; (None, None) for any other."""
        if method == "POST" and path == "/v1/tasks":
            return self._submit, None
        if not path.startswith(_TASKS):
            return None, None
        rest = path[len(_TASKS) :]
        if method == "GET":
            if rest and "/" not in rest:
                return self._show, rest
        elif method == "POST" and rest.endswith(_COMPLETE):
            task_id = rest[: -len(_COMPLETE)]
            if task_id and "/" not in task_id:
                return self._complete, task_id
        return None, None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        route, task_id = self._match(scope["method"], scope["path"])
        if route is None:
            await self.app(scope, receive, send)
            return
        # What Starlette's router would have put in the scope for the endpoint and
        # tracing (which names spans by ``scope["route"]``).
        scope["route"], scope["endpoint"] = route, route.endpoint
        scope["path_params"] = {} if task_id is None else {"task_id": task_id}
        request = Request(scope, receive, send)
        try:
            response = await route.endpoint(request)
        except Exception as exc:
            response = await render(request, exc)
        start = {"type": "http.response.start", "status": response.status_code}
        start["headers"] = response.raw_headers
        await send(start)
        await send({"type": "http.response.body", "body": response.body})
