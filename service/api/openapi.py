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
)
# Query strings: each Struct is spread into one parameter per field, so they are not
# components (a client generator would make a model of each that no call takes).
QUERIES: tuple[type[msgspec.Struct], ...] = (
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

# Every operation has one of these tags (client generators group calls by tag), in the
# order the document lists them.
TAGS: dict[str, str] = {
    "tasks": "Submit tasks, follow them, and drive them as their executor (admin)",
    "streams": "Task changes pushed live: Server-Sent Events and the WebSocket",
    "dead letters": "Events whose delivery gave up: read, replay (the tenant's own, or any "
    "as admin)",
    "notifications": "Where the tenant is told about its own delivery trouble",
    "signing": "Keys webhooks are signed with, and signed test events",
    "tenants": "Tenants and their credentials (admin)",
    "destinations": "Per-host delivery health (admin)",
    "operations": "Liveness, readiness, metrics and the operations console",
    "portal": "The partner portal and the single-use links that open it",
    "documentation": "This document and its rendered pages",
}


@cache
def _components() -> dict[str, Schema]:
    _, components = msgspec.json.schema_components(SHAPES, ref_template=REF)
    return components


@cache
def _query_schemas() -> dict[str, Schema]:
    _, schemas = msgspec.json.schema_components(QUERIES, ref_template=REF)
    return schemas


def _ref(shape: type[msgspec.Struct]) -> Schema:
    return {"$ref": REF.format(name=shape.__name__)}


def _not_null(schema: Schema) -> Schema:
    """A query parameter's schema: absent is how it is left out, never null."""
    schema = dict(schema)
    options = [s for s in schema.pop("anyOf", []) if s != {"type": "null"}]
    if options:
        schema = {**options[0], **{k: v for k, v in schema.items() if k != "default"}}
    return schema


def _query(shape: type[msgspec.Struct]) -> list[Schema]:
    """One parameter per field of a query Struct; lists are comma-separated."""
    component = _query_schemas()[shape.__name__]
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


def _named(op_id: str, tag: str, summary: str, **rest: Any) -> Schema:
    """An operation's name and tag, which generated clients name and group calls by."""
    assert tag in TAGS, tag
    return {"operationId": op_id, "tags": [tag], "summary": summary, **rest}


def _op(
    op_id: str,
    tag: str,
    summary: str,
    ok: tuple[int, type[msgspec.Struct]],
    *,
    body: type[msgspec.Struct] | None = None,
    params: list[Schema] | None = None,
    query: type[msgspec.Struct] | None = None,
    errors: tuple[int, ...] = (401, 404),
    secured: bool = True,
    body_required: bool = True,
    links: dict[str, Schema] | None = None,
) -> Schema:
    responses = {str(ok[0]): _json(_ref(ok[1]))}
    if links:
        responses[str(ok[0])]["links"] = links
    # 400 on every route: the parsing layer (service/api/request_guard.py) answers before routing.
    for code in sorted({400, *errors}):
        responses[str(code)] = _json(_ref(shapes.Error), "Error")
    op = _named(op_id, tag, summary, responses=responses)
    if body is not None:
        # A reference, never the schema in place: generators make one model per schema,
        # and an inline copy beside the component gave clients two models of each body.
        op["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    every = [*(params or []), *(_query(query) if query is not None else [])]
    if every:
        op["parameters"] = every
    if not secured:
        op["security"] = []
    return op


def _stream(
    op_id: str,
    summary: str,
    params: list[Schema],
    errors: tuple[int, ...],
    *,
    ends: bool = False,
) -> Schema:
    """A Server-Sent Events route: 200 is text/event-stream, errors are JSON; ``ends``:
    204 when the client already has the last event there will ever be."""
    op = _op(op_id, "streams", summary, (200, shapes.Error), params=params, errors=errors)
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
        "tags": [{"name": name, "description": text} for name, text in TAGS.items()],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": copy.deepcopy(_components()),
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/tasks": {
                "post": _op(
                    "submitTask",
                    "tasks",
                    "Submit a task",
                    (202, task),
                    links=TASK_LINKS,
                    body=shapes.SubmitBody,
                    params=[IDEMPOTENCY_KEY, *TRACE_CONTEXT],
                    errors=(400, 401, 403, 409, 413, 415, 422),
                ),
                "get": _op(
                    "listTasks",
                    "tasks",
                    "Reconcile: tasks changed since a time",
                    (200, shapes.TaskPage),
                    query=shapes.TaskListQuery,
                    errors=(400, 401, 403, 422),
                ),
            },
            "/v1/tasks/{task_id}": {
                "get": _op(
                    "getTask",
                    "tasks",
                    "A task; long-polls with ?wait=N",
                    (200, task),
                    params=tid,
                    query=shapes.WaitQuery,
                    errors=(400, 401, 404),
                )
            },
            "/v1/tasks/{task_id}/events": {
                "get": _stream(
                    "streamTask",
                    "The task's changes as Server-Sent Events (id: version) until terminal",
                    [*tid, LAST_EVENT_ID],
                    (400, 401, 403, 404, 429),
                    ends=True,
                )
            },
            "/v1/events": {
                "get": _stream(
                    "streamEvents",
                    "Every change of the tenant's tasks as Server-Sent Events (id: sequence)",
                    [LAST_EVENT_ID],
                    (400, 401, 403, 429),
                )
            },
            "/v1/tasks/{task_id}/deliveries": {
                "get": _op(
                    "getDeliveries",
                    "tasks",
                    "Attempt log",
                    (200, shapes.Deliveries),
                    params=tid,
                )
            },
            "/v1/tasks/{task_id}/redeliver": {
                "post": _op(
                    "redeliverTask",
                    "tasks",
                    "Send the terminal event again",
                    (202, task),
                    params=tid,
                    body=shapes.NoBody,
                    body_required=False,
                    errors=(401, 404, 409, 422),
                )
            },
            "/v1/tasks/{task_id}/start": {
                "post": _op(
                    "startTask",
                    "tasks",
                    "queued → running (admin)",
                    (200, task),
                    params=[*tid, *TRACE_CONTEXT],
                    errors=(401, 403, 404, 409),
                )
            },
            "/v1/tasks/{task_id}/complete": {
                "post": _op(
                    "completeTask",
                    "tasks",
                    "→ terminal (admin)",
                    (200, task),
                    params=[*tid, *TRACE_CONTEXT],
                    body=shapes.CompleteBody,
                    errors=(400, 401, 403, 404, 409, 422),
                )
            },
            "/v1/tasks/{task_id}/cancel": {
                "post": _op(
                    "cancelTask",
                    "tasks",
                    "→ cancelled",
                    (200, task),
                    params=[*tid, *TRACE_CONTEXT],
                    body=shapes.NoBody,
                    body_required=False,
                    errors=(401, 404, 409, 422),
                )
            },
            "/v1/tasks/{task_id}/progress": {
                "post": _op(
                    "reportProgress",
                    "tasks",
                    "Progress of a running task (admin); also the executor's heartbeat",
                    (200, task),
                    body=shapes.ProgressBody,
                    params=[*tid, *TRACE_CONTEXT],
                    errors=(400, 401, 403, 404, 409, 422),
                )
            },
            "/v1/admin/tenants": {
                "get": _op(
                    "listTenants",
                    "tenants",
                    "List tenants (admin)",
                    (200, shapes.TenantPage),
                    query=shapes.Paging,
                    errors=(400, 401, 403),
                ),
                "post": _op(
                    "createTenant",
                    "tenants",
                    "Create a tenant (admin)",
                    (201, shapes.TenantCreated),
                    links={"RotateSecret": _link("rotateSecret", "tenant_id")},
                    body=shapes.TenantBody,
                    errors=(400, 401, 403, 422),
                ),
            },
            "/v1/admin/tenants/{tenant_id}/rotate-secret": {
                "post": _op(
                    "rotateSecret",
                    "tenants",
                    "Rotate the signing secret (admin)",
                    (200, shapes.SecretRotated),
                    body=shapes.NoBody,
                    body_required=False,
                    params=[_p("tenant_id")],
                    errors=(401, 403, 404, 422),
                )
            },
            "/v1/admin/tenants/{tenant_id}/rotate-key": {
                "post": _op(
                    "rotateApiKey",
                    "tenants",
                    "Rotate the API key (admin); the old key stops working at once",
                    (200, shapes.KeyRotated),
                    params=[_p("tenant_id")],
                    errors=(401, 403, 404),
                )
            },
            "/ops": {
                "get": _named(
                    "getConsole",
                    "operations",
                    "The operations console (HTML); sign in with the admin token",
                    security=[],
                    responses={"303": {"description": "to the sign-in page or the overview"}},
                )
            },
            "/portal": {
                "get": _named(
                    "getPortal",
                    "portal",
                    "The partner portal (HTML); opened with a portal link",
                    security=[],
                    responses={"308": {"description": "to the portal's pages"}},
                )
            },
            "/v1/portal-links": {
                "post": _op(
                    "createPortalLink",
                    "portal",
                    "A single-use link into the partner portal (15 minutes to open it)",
                    (201, shapes.PortalLink),
                    body=shapes.PortalLinkBody,
                    body_required=False,
                    errors=(401, 403, 413, 415, 422),
                )
            },
            "/v1/admin/tenants/{tenant_id}/portal-links": {
                "post": _op(
                    "createTenantPortalLink",
                    "portal",
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
                    "getSigningKeys",
                    "signing",
                    "Keys the tenant's webhooks are signed with; v1a public keys",
                    (200, shapes.SigningKeys),
                    errors=(401, 403),
                )
            },
            "/v1/test-events": {
                "post": _op(
                    "sendTestEvent",
                    "signing",
                    "Queue a signed ping webhook to a URL (retries, attempt log)",
                    (202, shapes.TestEvent),
                    body=shapes.PingBody,
                    errors=(400, 401, 403, 413, 415, 422),
                )
            },
            "/v1/test-events/{event_id}": {
                "get": _op(
                    "getTestEvent",
                    "signing",
                    "A test event: status and attempts",
                    (200, shapes.TestEvent),
                    params=[_p("event_id")],
                    errors=(401, 403, 404),
                )
            },
            "/v1/dead-letters": {
                "get": _op(
                    "listOwnDeadLetters",
                    "dead letters",
                    "The tenant's own dead letters",
                    (200, shapes.DeadLetterPage),
                    query=shapes.OwnDeadLetterQuery,
                    errors=(400, 401, 403),
                )
            },
            "/v1/dead-letters/replay": {
                "post": _op(
                    "replayOwnDeadLetters",
                    "dead letters",
                    "Replay the tenant's own dead letters by filter (audited); dryRun=true "
                    "counts them only",
                    (202, shapes.Replayed),
                    body=shapes.OwnBulkReplayBody,
                    body_required=False,
                    query=shapes.OwnReplayQuery,
                    errors=(400, 401, 403, 422),
                )
            },
            "/v1/dead-letters/{event_id}": {
                "get": _op(
                    "getOwnDeadLetter",
                    "dead letters",
                    "One of the tenant's dead letters, with its attempts",
                    (200, shapes.DeadLetterDetail),
                    params=eid,
                    errors=(401, 403, 404),
                )
            },
            "/v1/dead-letters/{event_id}/replay": {
                "post": _op(
                    "replayOwnDeadLetter",
                    "dead letters",
                    "Replay one of the tenant's dead letters (same event id, fresh budget; "
                    "audited)",
                    (202, shapes.Replayed),
                    body=shapes.ReplayBody,
                    body_required=False,
                    params=eid,
                    errors=(401, 403, 404, 409, 422),
                )
            },
            "/v1/notifications": {
                "get": _op(
                    "getNotifications",
                    "notifications",
                    "Where the tenant is told about its own delivery trouble",
                    (200, shapes.Notifications),
                    errors=(401, 403, 404),
                ),
                "put": _op(
                    "setNotifications",
                    "notifications",
                    "Set the notification URL and events (checked as a callbackUrl is)",
                    (200, shapes.Notifications),
                    body=shapes.NotificationsBody,
                    errors=(400, 401, 403, 413, 415, 422),
                ),
                "delete": _named(
                    "deleteNotifications",
                    "notifications",
                    "Stop notifications (204, set or not)",
                    responses={
                        "204": {"description": "no notification URL is set now"},
                        **{
                            str(code): _json(_ref(shapes.Error), "Error")
                            for code in (400, 401, 403)
                        },
                    },
                ),
            },
            "/v1/admin/dead-letters": {
                "get": _op(
                    "listDeadLetters",
                    "dead letters",
                    "Dead letters (admin)",
                    (200, shapes.DeadLetterPage),
                    query=shapes.DeadLetterQuery,
                    errors=(400, 401, 403),
                )
            },
            "/v1/admin/dead-letters/replay": {
                "post": _op(
                    "replayDeadLetters",
                    "dead letters",
                    "Replay by filter (admin); the filters in the body or the query string",
                    (202, shapes.Replayed),
                    body=shapes.BulkReplayBody,
                    body_required=False,
                    query=shapes.DeadLetterFilter,
                    errors=(400, 401, 403, 422),
                )
            },
            "/v1/admin/dead-letters/{event_id}": {
                "get": _op(
                    "getDeadLetter",
                    "dead letters",
                    "One dead letter with history (admin)",
                    (200, shapes.DeadLetterDetail),
                    params=eid,
                    errors=(401, 403, 404),
                )
            },
            "/v1/admin/dead-letters/{event_id}/replay": {
                "post": _op(
                    "replayDeadLetter",
                    "dead letters",
                    "Replay one (admin)",
                    (202, shapes.Replayed),
                    body=shapes.ReplayBody,
                    body_required=False,
                    params=eid,
                    errors=(401, 403, 404, 409, 422),
                )
            },
            "/v1/admin/destinations": {
                "get": _op(
                    "listDestinations",
                    "destinations",
                    "Per-host health (admin)",
                    (200, shapes.Destinations),
                    query=shapes.LimitQuery,
                    errors=(400, 401, 403),
                )
            },
            "/healthz": {
                "get": _op(
                    "getLiveness",
                    "operations",
                    "Liveness",
                    (200, shapes.Liveness),
                    errors=(),
                    secured=False,
                )
            },
            "/readyz": {
                "get": _op(
                    "getReadiness",
                    "operations",
                    "Database reachable",
                    (200, shapes.Health),
                    errors=(503,),
                    secured=False,
                )
            },
            "/metrics": {
                "get": _named(
                    "getMetrics",
                    "operations",
                    "Prometheus metrics (admin token or HOOKRELAY_METRICS_TOKEN)",
                    responses={
                        "200": {"description": "text exposition"},
                        "401": {
                            "description": "missing or wrong token",
                            "content": {"application/json": {"schema": _ref(shapes.Error)}},
                        },
                    },
                )
            },
            "/openapi.json": {
                "get": _named(
                    "getOpenApi",
                    "documentation",
                    "This document",
                    security=[],
                    responses={"200": {"description": "OpenAPI 3.1"}},
                )
            },
            "/docs": {
                "get": _named(
                    "getDocs",
                    "documentation",
                    "This document rendered by Swagger UI (HTML, no CDN)",
                    security=[],
                    responses={"200": {"description": "text/html"}},
                )
            },
            "/v1/ws": {
                "get": _named(
                    "openWebSocket",
                    "streams",
                    "WebSocket: task changes pushed live (README: WebSocket)",
                    description=(
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
                    security=[],
                    responses={
                        "101": {"description": "Switching Protocols: the WebSocket is open"},
                        "400": _json(_ref(shapes.Error), "Error"),
                        "426": _json(_ref(shapes.Error), "Upgrade Required: a plain HTTP request"),
                    },
                )
            },
            "/docs/follow": {
                "get": _named(
                    "getFollowPage",
                    "documentation",
                    "A page that follows one task live over /v1/ws (HTML, no CDN)",
                    security=[],
                    responses={"200": {"description": "text/html"}},
                )
            },
            "/docs/{asset}": {
                "get": _named(
                    "getDocsAsset",
                    "documentation",
                    "The page's packaged Swagger UI files and their licence",
                    security=[],
                    parameters=[_p("asset")],
                    responses={
                        "200": {"description": "the file"},
                        "404": _json(_ref(shapes.Error), "Error"),
                    },
                )
            },
        },
    }


async def openapi(request: Request) -> Response:
    return Response(msgspec.json.encode(spec()), media_type="application/json")


routes = [Route("/openapi.json", openapi, methods=["GET"])]
