"""``/openapi.json``: an OpenAPI 3.1 description of every route, written as data."""

from __future__ import annotations

from typing import Any, get_args

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hookrelay.outbox.models import (
    CircuitState,
    DeliveryStatus,
    KeyScheme,
    Outcome,
    SignatureScheme,
    TaskStatus,
    TerminalStatus,
    TestEventStatus,
)

Schema = dict[str, Any]


def _enum(literal: Any) -> Schema:
    """A JSON Schema enum of a Literal's values (outbox/models.py holds them once)."""
    return {"enum": list(get_args(literal))}


TS: Schema = {"type": ["string", "null"], "format": "date-time"}
ERROR: Schema = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}
DELIVERY: Schema = {
    "type": "object",
    "properties": {
        "eventId": {"type": ["string", "null"]},
        "status": _enum(DeliveryStatus),
        "attempts": {"type": "integer"},
        "lastAttemptAt": TS,
        "lastStatusCode": {"type": ["integer", "null"]},
        "lastError": {"type": ["string", "null"]},
        "nextAttemptAt": TS,
        "deliveredAt": TS,
    },
}
TASK: Schema = {
    "type": "object",
    "required": ["id", "type", "status", "version", "delivery"],
    "properties": {
        "id": {"type": "string", "pattern": "^task_"},
        "type": {"type": "string"},
        "status": _enum(TaskStatus),
        "input": {},
        "result": {},
        "error": {},
        "callbackUrl": {"type": "string", "format": "uri"},
        "metadata": {"type": ["object", "null"]},
        "createdAt": TS,
        "updatedAt": TS,
        "completedAt": TS,
        "timeoutAt": TS,
        "heartbeatTimeoutSeconds": {"type": ["number", "null"]},
        "onTimeout": {"type": ["object", "null"]},
        "progress": {
            "type": ["object", "null"],
            "properties": {
                "percent": {"type": "number"},
                "message": {"type": ["string", "null"]},
                "updatedAt": {"type": "string", "format": "date-time"},
            },
        },
        "version": {"type": "integer"},
        "delivery": DELIVERY,
    },
}
SIGNING_KEYS: Schema = {
    "type": "object",
    "properties": {
        "signatureScheme": _enum(SignatureScheme),
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["scheme", "createdAt", "expiresAt"],
                "properties": {
                    "scheme": _enum(KeyScheme),
                    "publicKey": {"type": "string", "pattern": "^whpk_"},
                    "createdAt": TS,
                    "expiresAt": TS,
                },
            },
        },
    },
}
SUBMIT: Schema = {
    "type": "object",
    "required": ["type", "callbackUrl"],
    "additionalProperties": False,
    "properties": {
        "type": {"type": "string", "minLength": 1, "maxLength": 100},
        "input": {},
        "callbackUrl": {"type": "string", "maxLength": 2048},
        "metadata": {"type": "object"},
        "timeoutSeconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 2592000},
        "heartbeatTimeoutSeconds": {"type": "number", "minimum": 1, "maximum": 2592000},
        "onTimeout": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"result": {}, "error": {}},
        },
    },
}
PROGRESS: Schema = {
    "type": "object",
    "required": ["percent"],
    "additionalProperties": False,
    "properties": {
        "percent": {"type": "number", "minimum": 0, "maximum": 100},
        "message": {"type": "string", "maxLength": 1000},
    },
}
COMPLETE: Schema = {
    "type": "object",
    "required": ["status"],
    "additionalProperties": False,
    "properties": {"status": _enum(TerminalStatus), "result": {}, "error": {}},
}
ATTEMPT: Schema = {
    "type": "object",
    "properties": {
        "eventId": {"type": "string"},
        "number": {"type": "integer"},
        "attemptedAt": TS,
        "durationMs": {"type": "number"},
        "outcome": _enum(Outcome),
        "statusCode": {"type": ["integer", "null"]},
        "error": {"type": ["string", "null"]},
        "responsePrefix": {"type": ["string", "null"]},
    },
}
TEST_EVENT: Schema = {
    "type": "object",
    "required": ["eventId", "type", "status"],
    "properties": {
        "eventId": {"type": "string", "pattern": "^evt_"},
        "type": {"const": "ping"},
        "status": _enum(TestEventStatus),
        "attempts": {"type": "array", "items": ATTEMPT},
    },
}
DEAD_LETTER: Schema = {
    "type": "object",
    "properties": {
        k: {}
        for k in (
            "eventId",
            "tenantId",
            "taskId",
            "eventType",
            "callbackUrl",
            "createdAt",
            "failedAt",
            "attempts",
            "lastError",
            "lastStatusCode",
            "replayCount",
        )
    },
}

DESTINATION: Schema = {
    "type": "object",
    "properties": {
        "host": {"type": "string"},
        "state": _enum(CircuitState),
        **{
            k: {}
            for k in (
                "consecutiveFailures",
                "lastError",
                "lastFailureAt",
                "openedAt",
                "nextProbeAt",
                "heldDeliveries",
            )
        },
    },
}


def _json(schema: Schema, description: str = "OK") -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


TENANT: Schema = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "createdAt": {"type": "string", "format": "date-time"},
        "secretCount": {"type": "integer", "description": "signing secrets that sign now"},
    },
}

# Why an operator replays; kept in the audit trail (ops_audit).
REASON: Schema = {"type": "string", "minLength": 1, "maxLength": 500}


def _page(item: Schema) -> Schema:
    return {
        "type": "object",
        "properties": {
            "data": {"type": "array", "items": item},
            "nextCursor": {"type": ["string", "null"]},
        },
    }


def _op(
    summary: str,
    ok: tuple[int, Schema],
    *,
    body: Schema | None = None,
    params: list[Schema] | None = None,
    errors: tuple[int, ...] = (401, 404),
    secured: bool = True,
    body_required: bool = True,
    op_id: str | None = None,
    links: dict[str, Schema] | None = None,
) -> Schema:
    responses = {str(ok[0]): _json(ok[1])}
    if links:
        responses[str(ok[0])]["links"] = links
    # 400 on every route: the parsing layer (service/api/request_guard.py) answers before routing.
    for code in sorted({400, *errors}):
        responses[str(code)] = _json({"$ref": "#/components/schemas/Error"}, "Error")
    op: Schema = {"summary": summary, "responses": responses}
    if op_id is not None:
        op["operationId"] = op_id
    if body is not None:
        op["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": body}},
        }
    if params:
        op["parameters"] = params
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
    op = _op(summary, (200, {}), params=params, errors=errors, op_id=op_id)
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


def _q(name: str, schema: Schema) -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema}


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
DATE: Schema = {"type": "string", "format": "date-time"}
# Routes that take no input still read (and check) a body if one is sent.
NO_BODY: Schema = {"type": "object", "description": "ignored"}


def spec() -> Schema:
    task = {"$ref": "#/components/schemas/Task"}
    tid, eid = [_p("task_id")], [_p("event_id")]
    filters = [
        _q("tenant", {"type": "string"}),
        _q("since", DATE),
        _q("until", DATE),
        _q("eventType", {"type": "string"}),
    ]
    paging = [
        _q("limit", {"type": "integer", "minimum": 1, "maximum": 1000}),
        _q("cursor", {"type": "string"}),
    ]
    status = {"type": "object", "properties": {"status": {"type": "string"}}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "hookrelay",
            "version": "0.1.0",
            "description": "Webhook delivery with a transactional outbox.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": ERROR, "Task": TASK},
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/tasks": {
                "post": _op(
                    "Submit a task",
                    (202, task),
                    op_id="submitTask",
                    links=TASK_LINKS,
                    body=SUBMIT,
                    params=[
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "string"},
                        }
                    ],
                    errors=(400, 401, 403, 409, 413, 415, 422),
                ),
                "get": _op(
                    "Reconcile: tasks changed since a time",
                    (200, _page(task)),
                    op_id="listTasks",
                    params=[
                        _q("status", {"type": "string"}),
                        _q("updatedAfter", DATE),
                        *paging,
                        _q("fields", {"type": "string"}),
                    ],
                    errors=(400, 401, 403, 422),
                ),
            },
            "/v1/tasks/{task_id}": {
                "get": _op(
                    "A task; long-polls with ?wait=N",
                    (200, task),
                    op_id="getTask",
                    params=[*tid, _q("wait", {"type": "number", "minimum": 0, "maximum": 30})],
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
                    (
                        200,
                        {
                            "type": "object",
                            "properties": {"data": {"type": "array", "items": ATTEMPT}},
                        },
                    ),
                    params=tid,
                    op_id="getDeliveries",
                )
            },
            "/v1/tasks/{task_id}/redeliver": {
                "post": _op(
                    "Send the terminal event again",
                    (202, task),
                    params=tid,
                    body=NO_BODY,
                    body_required=False,
                    errors=(401, 404, 409),
                    op_id="redeliverTask",
                )
            },
            "/v1/tasks/{task_id}/start": {
                "post": _op(
                    "queued → running (admin)",
                    (200, task),
                    params=tid,
                    errors=(401, 403, 404, 409),
                    op_id="startTask",
                )
            },
            "/v1/tasks/{task_id}/complete": {
                "post": _op(
                    "→ terminal (admin)",
                    (200, task),
                    op_id="completeTask",
                    params=tid,
                    body=COMPLETE,
                    errors=(400, 401, 403, 404, 409, 422),
                )
            },
            "/v1/tasks/{task_id}/cancel": {
                "post": _op(
                    "→ cancelled",
                    (200, task),
                    params=tid,
                    body=NO_BODY,
                    body_required=False,
                    errors=(401, 404, 409),
                    op_id="cancelTask",
                )
            },
            "/v1/tasks/{task_id}/progress": {
                "post": _op(
                    "Progress of a running task (admin); also the executor's heartbeat",
                    (200, task),
                    body=PROGRESS,
                    params=tid,
                    errors=(400, 401, 403, 404, 409, 422),
                )
            },
            "/v1/admin/tenants": {
                "get": _op(
                    "List tenants (admin)",
                    (200, _page(TENANT)),
                    params=paging,
                    errors=(400, 401, 403),
                ),
                "post": _op(
                    "Create a tenant (admin)",
                    (
                        201,
                        {
                            "type": "object",
                            "required": ["id"],
                            "properties": {"id": {"type": "string"}},
                        },
                    ),
                    op_id="createTenant",
                    links={"RotateSecret": _link("rotateSecret", "tenant_id")},
                    body={
                        "type": "object",
                        "required": ["name"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string", "minLength": 1, "maxLength": 200},
                            "signatureScheme": _enum(SignatureScheme),
                        },
                    },
                    errors=(400, 401, 403, 422),
                ),
            },
            "/v1/admin/tenants/{tenant_id}/rotate-secret": {
                "post": _op(
                    "Rotate the signing secret (admin)",
                    (200, {"type": "object"}),
                    op_id="rotateSecret",
                    body=NO_BODY,
                    body_required=False,
                    params=[_p("tenant_id")],
                    errors=(401, 403, 404),
                )
            },
            "/v1/admin/tenants/{tenant_id}/rotate-key": {
                "post": _op(
                    "Rotate the API key (admin); the old key stops working at once",
                    (
                        200,
                        {
                            "type": "object",
                            "properties": {"id": {"type": "string"}, "apiKey": {"type": "string"}},
                        },
                    ),
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
            "/v1/signing-keys": {
                "get": _op(
                    "Keys the tenant's webhooks are signed with; v1a public keys",
                    (200, SIGNING_KEYS),
                    errors=(401, 403),
                )
            },
            "/v1/test-events": {
                "post": _op(
                    "Queue a signed ping webhook to a URL (retries, attempt log)",
                    (202, TEST_EVENT),
                    body={
                        "type": "object",
                        "required": ["callbackUrl"],
                        "additionalProperties": False,
                        "properties": {"callbackUrl": {"type": "string", "maxLength": 2048}},
                    },
                    errors=(400, 401, 403, 413, 415, 422),
                )
            },
            "/v1/test-events/{event_id}": {
                "get": _op(
                    "A test event: status and attempts",
                    (200, TEST_EVENT),
                    params=[_p("event_id")],
                    errors=(401, 403, 404),
                )
            },
            "/v1/admin/dead-letters": {
                "get": _op(
                    "Dead letters (admin)",
                    (200, _page(DEAD_LETTER)),
                    op_id="listDeadLetters",
                    params=[*filters, *paging],
                    errors=(400, 401, 403),
                )
            },
            "/v1/admin/dead-letters/replay": {
                "post": _op(
                    "Replay by filter (admin)",
                    (202, {"type": "object", "properties": {"replayed": {"type": "integer"}}}),
                    op_id="replayDeadLetters",
                    body={
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "tenant": {"type": "string"},
                            "since": DATE,
                            "until": DATE,
                            "eventType": {"type": "string"},
                            "reason": REASON,
                        },
                    },
                    body_required=False,
                    params=filters,
                    errors=(400, 401, 403, 422),
                )
            },
            "/v1/admin/dead-letters/{event_id}": {
                "get": _op(
                    "One dead letter with history (admin)",
                    (200, DEAD_LETTER),
                    op_id="getDeadLetter",
                    params=eid,
                    errors=(401, 403, 404),
                )
            },
            "/v1/admin/dead-letters/{event_id}/replay": {
                "post": _op(
                    "Replay one (admin)",
                    (202, {"type": "object"}),
                    op_id="replayDeadLetter",
                    body={
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"reason": REASON},
                    },
                    body_required=False,
                    params=eid,
                    errors=(401, 403, 404, 409, 422),
                )
            },
            "/v1/admin/destinations": {
                "get": _op(
                    "Per-host health (admin)",
                    (
                        200,
                        {
                            "type": "object",
                            "properties": {"data": {"type": "array", "items": DESTINATION}},
                        },
                    ),
                    op_id="listDestinations",
                    errors=(401, 403),
                )
            },
            "/healthz": {"get": _op("Liveness", (200, status), errors=(), secured=False)},
            "/readyz": {
                "get": _op("Database reachable", (200, status), errors=(503,), secured=False)
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (admin token or HOOKRELAY_METRICS_TOKEN)",
                    "responses": {
                        "200": {"description": "text exposition"},
                        "401": {
                            "description": "missing or wrong token",
                            "content": {"application/json": {"schema": ERROR}},
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
                        "400": _json({"$ref": "#/components/schemas/Error"}, "Error"),
                        "426": _json(
                            {"$ref": "#/components/schemas/Error"},
                            "Upgrade Required: a plain HTTP request",
                        ),
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
                        "404": _json({"$ref": "#/components/schemas/Error"}, "Error"),
                    },
                }
            },
        },
    }


async def openapi(request: Request) -> Response:
    return JSONResponse(spec())


routes = [Route("/openapi.json", openapi, methods=["GET"])]
