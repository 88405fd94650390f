"""``/openapi.json``: an OpenAPI 3.1 description of every route.

The schemas of bodies, query parameters and answers are generated from the Structs of
``hookrelay.service.api.shapes`` (and the task's, in ``hookrelay.outbox.models``): the
same declarations that decode, validate and encode them. What is written here is what
no shape holds: each route's summary, statuses, credentials and links.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookrelay.outbox.models import TaskResource
from hookrelay.service.api import shapes
from hookrelay.service.api.release import release

Schema = dict[str, Any]
REF = "#/components/schemas/{name}"

# Every Struct the document names; their schemas become components.
SHAPES: tuple[type[msgspec.Struct], ...] = (
    shapes.Error,
    TaskResource,
    shapes.TaskPage,
    shapes.Deliveries,
    shapes.TenantCreated,
    shapes.TenantPage,
    shapes.SecretRotated,
    shapes.KeyRotated,
    shapes.DeadLetterPage,
    shapes.DeadLetterDetail,
    shapes.Replayed,
    shapes.Destinations,
    shapes.Notifications,
    shapes.SigningKeys,
    shapes.TestEvent,
    shapes.PortalLink,
    shapes.Liveness,
    shapes.Health,
    shapes.SubmitBody,
    shapes.CompleteBody,
    shapes.ProgressBody,
    shapes.TenantBody,
    shapes.ReplayBody,
    shapes.BulkReplayBody,
    shapes.OwnBulkReplayBody,
    shapes.NotificationsBody,
    shapes.PingBody,
    shapes.PortalLinkBody,
    shapes.NoBody,
    shapes.WaitQuery,
    shapes.Paging,
    shapes.TaskListQuery,
    shapes.DeadLetterFilter,
    shapes.DeadLetterQuery,
    shapes.OwnDeadLetterFilter,
    shapes.OwnDeadLetterQuery,
    shapes.OwnReplayQuery,
    shapes.LimitQuery,
)


@cache
def _components() -> dict[str, Schema]:
    _, components = msgspec.json.schema_components(SHAPES, ref_template=REF)
    return components


def _ref(shape: type[msgspec.Struct]) -> Schema:
    return {"$ref": REF.format(name=shape.__name__)}


def _inline(shape: type[msgspec.Struct]) -> Schema:
    """A request body's schema in place (each body belongs to one route)."""
    return copy.deepcopy(_components()[shape.__name__])


def _not_null(schema: Schema) -> Schema:
    """A query parameter's schema: absent is how it is left out, never null."""
    schema = dict(schema)
    options = [s for s in schema.pop("anyOf", []) if s != {"type": "null"}]
    if options:
        schema = {**options[0], **{k: v for k, v in schema.items() if k != "default"}}
    return schema


def _query(shape: type[msgspec.Struct]) -> list[Schema]:
    """One parameter per field of a query Struct; lists are comma-separated."""
    component = _components()[shape.__name__]
    params = []
    for name, schema in component["properties"].items():
        schema = _not_null(schema)
        param: Schema = {
            "name": name,
            "in": "query",
            "required": name in component.get("required", []),
            "schema": schema,
        }
        if schema.get("type") == "array":
            param.update(style="form", explode=False)
        params.append(param)
    return params


def _json(schema: Schema, description: str = "OK") -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _op(
    summary: str,
    ok: tuple[int, type[msgspec.Struct]],
    *,
    body: type[msgspec.Struct] | None = None,
    params: list[Schema] | None = None,
    query: type[msgspec.Struct] | None = None,
    errors: tuple[int, ...] = (401, 404),
    secured: bool = True,
    body_required: bool = True,
    op_id: str | None = None,
    links: dict[str, Schema] | None = None,
) -> Schema:
    responses = {str(ok[0]): _json(_ref(ok[1]))}
    if links:
        responses[str(ok[0])]["links"] = links
    # 400 on every route: the parsing layer (service/api/request_guard.py) answers before routing.
    for code in sorted({400, *errors}):
        responses[str(code)] = _json(_ref(shapes.Error), "Error")
    op: Schema = {"summary": summary, "responses": responses}
    if op_id is not None:
        op["operationId"] = op_id
    if body is not None:
        op["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": _inline(body)}},
        }
    every = [*(params or []), *(_query(query) if query is not None else [])]
    if every:
        op["parameters"] = every
    if not secured:
        op["security"] = []
    return op


def _stream(
    summary: str,
    params: list[Schema],
    op_id: str,
    errors: tuple[int, ...],
    *,
    ends: bool = False,
) -> Schema:
    """A Server-Sent Events route: 200 is text/event-stream, errors are JSON; ``ends``:
    204 when the client already has the last event there will ever be."""
    op = _op(summary, (200, shapes.Error), params=params, errors=errors, op_id=op_id)
    op["responses"]["200"] = {
        "description": "Server-Sent Events: `event: task` with the task as `data`, "
        "`event: reset` when history is gone, `: ping` comments",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
    if ends:
        op["responses"]["204"] = {
            "description": "Last-Event-ID is the finished task's final version: nothing more "
            "will come (EventSource stops reconnecting)"
        }
    return op


LAST_EVENT_ID: Schema = {
    "name": "Last-Event-ID",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
    "description": "resume after this id (what the stream sent as `id:`)",
}
IDEMPOTENCY_KEY: Schema = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": msgspec.json.schema(shapes.IdempotencyKey),
}

# W3C Trace Context (https://www.w3.org/TR/trace-context/): never refused, a malformed
# value is ignored, as the specification says.
TRACE_CONTEXT: list[Schema] = [
    {
        "name": "traceparent",
        "in": "header",
        "required": False,
        "schema": {"type": "string"},
        "description": "W3C traceparent: the request's span is its child; on a submit, "
        "the task keeps it and every attempt of its webhook continues that trace "
        "(a malformed one is ignored)",
    },
    {
        "name": "tracestate",
        "in": "header",
        "required": False,
        "schema": {"type": "string"},
        "description": "W3C tracestate, kept and passed on with traceparent",
    },
]


def _p(name: str) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _link(op_id: str, param: str) -> Schema:
    return {"operationId": op_id, "parameters": {param: "$response.body#/id"}}


TASK_LINKS = {
    name: _link(op_id, "task_id")
    for name, op_id in (
        ("GetTask", "getTask"),
        ("GetDeliveries", "getDeliveries"),
        ("Redeliver", "redeliverTask"),
        ("Start", "startTask"),
        ("Complete", "completeTask"),
        ("Cancel", "cancelTask"),
    )
}
DESCRIPTION = (
    "Webhook delivery with a transactional outbox.\n\n"
    "Every request body is at most HOOKRELAY_MAX_BODY_BYTES (413), JSON (415 otherwise), "
    "nested at most 32 levels deep (400), and holds no NUL character and no lone UTF-16 "
    "surrogate in any string or key (422): PostgreSQL could not store them. Errors are "
    '`{"error": {"code", "message"}}`; a refused field is named by its path.'
)


def spec() -> Schema:
    task = TaskResource
    tid, eid = [_p("task_id")], [_p("event_id")]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "hookrelay",
            "version": release(),
            "description": DESCRIPTION,
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": copy.deepcopy(_components()),
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/tasks": {
                "post": _op(
                    "Submit a task",
                    (202, task),
                    op_id="submitTask",
                    links=TASK_LINKS,
                    body=shapes.SubmitBody,
                    params=[IDEMPOTENCY_KEY, *TRACE_CONTEXT],
                    errors=(400, 401, 403, 409, 413, 415, 422),
                ),
                "get": _op(
                    "Reconcile: tasks changed since a time",
                    (200, shapes.TaskPage),
                    op_id="listTasks",
                    query=shapes.TaskListQuery,
                    errors=(400, 401, 403, 422),
                ),
            },
            "/v1/tasks/{task_id}": {
                "get": _op(
                    "A task; long-polls with ?wait=N",
                    (200, task),
                    op_id="getTask",
                    params=tid,
                    query=shapes.WaitQuery,
                    errors=(400, 401, 404),
                )
            },
            "/v1/tasks/{task_id}/events": {
                "get": _stream(
                    "The task's changes as Server-Sent Events (id: version) until terminal",
                    [*tid, LAST_EVENT_ID],
                    "streamTask",
                    (400, 401, 403, 404, 429),
                    ends=True,
                )
            },
            "/v1/events": {
                "get": _stream(
                    "Every change of the tenant's tasks as Server-Sent Events (id: sequence)",
                    [LAST_EVENT_ID],
                    "streamEvents",
                    (400, 401, 403, 429),
                )
            },
            "/v1/tasks/{task_id}/deliveries": {
                "get": _op(
                    "Attempt log",
                    (200, shapes.Deliveries),
                    params=tid,
                    op_id="getDeliveries",
                )
            },
            "/v1/tasks/{task_id}/redeliver": {
                "post": _op(
                    "Send the terminal event again",
                    (202, task),
                    params=tid,
                    body=shapes.NoBody,
                    body_required=False,
                    errors=(401, 404, 409, 422),
                    op_id="redeliverTask",
                )
            },
            "/v1/tasks/{task_id}/start": {
                "post": _op(
                    "queued → running (admin)",
                    (200, task),
                    params=[*tid, *TRACE_CONTEXT],
                    errors=(401, 403, 404, 409),
                    op_id="startTask",
                )
            },
            "/v1/tasks/{task_id}/complete": {
                "post": _op(
                    "→ terminal (admin)",
                    (200, task),
                    op_id="completeTask",
                    params=[*tid, *TRACE_CONTEXT],
                    body=shapes.CompleteBody,
                    errors=(400, 401, 403, 404, 409, 422),
                )
            },
            "/v1/tasks/{task_id}/cancel": {
                "post": _op(
                    "→ cancelled",
                    (200, task),
                    params=[*tid, *TRACE_CONTEXT],
                    body=shapes.NoBody,
                    body_required=False,
                    errors=(401, 404, 409, 422),
                    op_id="cancelTask",
                )
            },
            "/v1/tasks/{task_id}/progress": {
                "post": _op(
                    "Progress of a running task (admin); also the executor's heartbeat",
                    (200, task),
                    body=shapes.ProgressBody,
                    params=[*tid, *TRACE_CONTEXT],
                    errors=(400, 401, 403, 404, 409, 422),
                )
            },
            "/v1/admin/tenants": {
                "get": _op(
                    "List tenants (admin)",
                    (200, shapes.TenantPage),
                    query=shapes.Paging,
                    errors=(400, 401, 403),
                ),
                "post": _op(
                    "Create a tenant (admin)",
                    (201, shapes.TenantCreated),
                    op_id="createTenant",
                    links={"RotateSecret": _link("rotateSecret", "tenant_id")},
                    body=shapes.TenantBody,
                    errors=(400, 401, 403, 422),
                ),
            },
            "/v1/admin/tenants/{tenant_id}/rotate-secret": {
                "post": _op(
                    "Rotate the signing secret (admin)",
                    (200, shapes.SecretRotated),
                    op_id="rotateSecret",
                    body=shapes.NoBody,
                    body_required=False,
                    params=[_p("tenant_id")],
                    errors=(401, 403, 404, 422),
                )
            },
            "/v1/admin/tenants/{tenant_id}/rotate-key": {
                "post": _op(
                    "Rotate the API key (admin); the old key stops working at once",
                    (200, shapes.KeyRotated),
                    params=[_p("tenant_id")],
                    errors=(401, 403, 404),
                )
            },
            "/ops": {
                "get": {
                    "summary": "The operations console (HTML); sign in with the admin token",
                    "security": [],
                    "responses": {"303": {"description": "to the sign-in page or the overview"}},
                }
            },
            "/portal": {
                "get": {
                    "summary": "The partner portal (HTML); opened with a portal link",
                    "security": [],
                    "responses": {"308": {"description": "to the portal's pages"}},
                }
            },
            "/v1/portal-links": {
                "post": _op(
                    "A single-use link into the partner portal (15 minutes to open it)",
                    (201, shapes.PortalLink),
                    op_id="createPortalLink",
                    body=shapes.PortalLinkBody,
                    body_required=False,
                    errors=(401, 403, 413, 415, 422),
                )
            },
            "/v1/admin/tenants/{tenant_id}/portal-links": {
                "post": _op(
                    "A single-use link into the partner portal for a tenant (admin)",
                    (201, shapes.PortalLink),
                    body=shapes.PortalLinkBody,
                    body_required=False,
                    params=[_p("tenant_id")],
                    errors=(401, 403, 404, 413, 415, 422),
                )
            },
            "/v1/signing-keys": {
                "get": _op(
                    "Keys the tenant's webhooks are signed with; v1a public keys",
                    (200, shapes.SigningKeys),
                    errors=(401, 403),
                )
            },
            "/v1/test-events": {
                "post": _op(
                    "Queue a signed ping webhook to a URL (retries, attempt log)",
                    (202, shapes.TestEvent),
                    body=shapes.PingBody,
                    errors=(400, 401, 403, 413, 415, 422),
                )
            },
            "/v1/test-events/{event_id}": {
                "get": _op(
                    "A test event: status and attempts",
                    (200, shapes.TestEvent),
                    params=[_p("event_id")],
                    errors=(401, 403, 404),
                )
            },
            "/v1/dead-letters": {
                "get": _op(
                    "The tenant's own dead letters",
                    (200, shapes.DeadLetterPage),
                    op_id="listOwnDeadLetters",
                    query=shapes.OwnDeadLetterQuery,
                    errors=(400, 401, 403),
                )
            },
            "/v1/dead-letters/replay": {
                "post": _op(
                    "Replay the tenant's own dead letters by filter (audited); dryRun=true "
                    "counts them only",
                    (202, shapes.Replayed),
                    op_id="replayOwnDeadLetters",
                    body=shapes.OwnBulkReplayBody,
                    body_required=False,
                    query=shapes.OwnReplayQuery,
                    errors=(400, 401, 403, 422),
                )
            },
            "/v1/dead-letters/{event_id}": {
                "get": _op(
                    "One of the tenant's dead letters, with its attempts",
                    (200, shapes.DeadLetterDetail),
                    op_id="getOwnDeadLetter",
                    params=eid,
                    errors=(401, 403, 404),
                )
            },
            "/v1/dead-letters/{event_id}/replay": {
                "post": _op(
                    "Replay one of the tenant's dead letters (same event id, fresh budget; "
                    "audited)",
                    (202, shapes.Replayed),
                    op_id="replayOwnDeadLetter",
                    body=shapes.ReplayBody,
                    body_required=False,
                    params=eid,
                    errors=(401, 403, 404, 409, 422),
                )
            },
            "/v1/notifications": {
                "get": _op(
                    "Where the tenant is told about its own delivery trouble",
                    (200, shapes.Notifications),
                    op_id="getNotifications",
                    errors=(401, 403, 404),
                ),
                "put": _op(
                    "Set the notification URL and events (checked as a callbackUrl is)",
                    (200, shapes.Notifications),
                    op_id="setNotifications",
                    body=shapes.NotificationsBody,
                    errors=(400, 401, 403, 413, 415, 422),
                ),
                "delete": {
                    "summary": "Stop notifications (204, set or not)",
                    "operationId": "deleteNotifications",
                    "responses": {
                        "204": {"description": "no notification URL is set now"},
                        **{
                            str(code): _json(_ref(shapes.Error), "Error")
                            for code in (400, 401, 403)
                        },
                    },
                },
            },
            "/v1/admin/dead-letters": {
                "get": _op(
                    "Dead letters (admin)",
                    (200, shapes.DeadLetterPage),
                    op_id="listDeadLetters",
                    query=shapes.DeadLetterQuery,
                    errors=(400, 401, 403),
                )
            },
            "/v1/admin/dead-letters/replay": {
                "post": _op(
                    "Replay by filter (admin); the filters in the body or the query string",
                    (202, shapes.Replayed),
                    op_id="replayDeadLetters",
                    body=shapes.BulkReplayBody,
                    body_required=False,
                    query=shapes.DeadLetterFilter,
                    errors=(400, 401, 403, 422),
                )
            },
            "/v1/admin/dead-letters/{event_id}": {
                "get": _op(
                    "One dead letter with history (admin)",
                    (200, shapes.DeadLetterDetail),
                    op_id="getDeadLetter",
                    params=eid,
                    errors=(401, 403, 404),
                )
            },
            "/v1/admin/dead-letters/{event_id}/replay": {
                "post": _op(
                    "Replay one (admin)",
                    (202, shapes.Replayed),
                    op_id="replayDeadLetter",
                    body=shapes.ReplayBody,
                    body_required=False,
                    params=eid,
                    errors=(401, 403, 404, 409, 422),
                )
            },
            "/v1/admin/destinations": {
                "get": _op(
                    "Per-host health (admin)",
                    (200, shapes.Destinations),
                    op_id="listDestinations",
                    query=shapes.LimitQuery,
                    errors=(400, 401, 403),
                )
            },
            "/healthz": {"get": _op("Liveness", (200, shapes.Liveness), errors=(), secured=False)},
            "/readyz": {
                "get": _op("Database reachable", (200, shapes.Health), errors=(503,), secured=False)
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (admin token or HOOKRELAY_METRICS_TOKEN)",
                    "responses": {
                        "200": {"description": "text exposition"},
                        "401": {
                            "description": "missing or wrong token",
                            "content": {"application/json": {"schema": _ref(shapes.Error)}},
                        },
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "This document",
                    "security": [],
                    "responses": {"200": {"description": "OpenAPI 3.1"}},
                }
            },
            "/docs": {
                "get": {
                    "summary": "This document rendered by Swagger UI (HTML, no CDN)",
                    "security": [],
                    "responses": {"200": {"description": "text/html"}},
                }
            },
            "/v1/ws": {
                "get": {
                    "summary": "WebSocket: task changes pushed live (README: WebSocket)",
                    "description": (
                        "Connect with `Upgrade: websocket`; no credentials in the request. "
                        'First message `{"type":"auth","token":"<api key>"}` within '
                        "HOOKRELAY_WS_AUTH_TIMEOUT_S (30 s), else close 4401; then "
                        '`{"type":"subscribe","taskIds":[...]}` or `{"type":"subscribe",'
                        '"all":true}`, `unsubscribe`, `{"type":"resume","after":N}`. The '
                        'server sends `{"type":"task","sequence","timestamp","status",'
                        '"progress","task"}`, `{"type":"ping"}` every HOOKRELAY_WS_PING_S '
                        '(30 s) and `{"type":"error","code","message"}`. Close codes: 4400 '
                        "malformed, 4401 unauthorized, 4403 admin token, 4429 too many "
                        "streams, 4008 slow consumer, 1012 server stopping."
                    ),
                    "security": [],
                    "responses": {
                        "101": {"description": "Switching Protocols: the WebSocket is open"},
                        "400": _json(_ref(shapes.Error), "Error"),
                        "426": _json(_ref(shapes.Error), "Upgrade Required: a plain HTTP request"),
                    },
                }
            },
            "/docs/follow": {
                "get": {
                    "summary": "A page that follows one task live over /v1/ws (HTML, no CDN)",
                    "security": [],
                    "responses": {"200": {"description": "text/html"}},
                }
            },
            "/docs/{asset}": {
                "get": {
                    "summary": "The page's packaged Swagger UI files and their licence",
                    "security": [],
                    "parameters": [_p("asset")],
                    "responses": {
                        "200": {"description": "the file"},
                        "404": _json(_ref(shapes.Error), "Error"),
                    },
                }
            },
        },
    }


async def openapi(request: Request) -> Response:
    return Response(msgspec.json.encode(spec()), media_type="application/json")


routes = [Route("/openapi.json", openapi, methods=["GET"])]
