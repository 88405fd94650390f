"""The console's pages: overview, dead letters, events, tasks, destinations, tenants
(and each one's notifications), audit and search. Every POST passes
:func:`security.check_csrf` first."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, cast, get_args
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from hookrelay.outbox import ops
from hookrelay.outbox.errors import OutboxError
from hookrelay.outbox.models import ErrorClass
from hookrelay.outbox.ops import DeadLetterFilter, list_dead_letters
from hookrelay.outbox.store import console as store
from hookrelay.outbox.store import destinations as destination_store
from hookrelay.outbox.tasks import Cursor, get_task, redeliver
from hookrelay.outbox.tenants import create_tenant, list_tenants, rotate_api_key, rotate_secret
from hookrelay.service.api import validation
from hookrelay.service.api.errors import BadRequest
from hookrelay.service.console.security import FormRejected, check_csrf, read_form
from hookrelay.service.console.views import age, chart, page, when

ERROR_CLASSES: tuple[str, ...] = get_args(ErrorClass)
FILTER_FIELDS = ("tenant", "eventType", "since", "until", "status", "errorClass")
ACTOR = "ops"


def back(path: str, notice: str) -> RedirectResponse:
    return RedirectResponse(f"{path}?{urlencode({'notice': notice})}", status_code=303)


async def posted(request: Request) -> dict[str, list[str]]:
    form = await read_form(request)
    check_csrf(request, form)
    return form


def one(form: dict[str, list[str]], name: str) -> str:
    return (form.get(name) or [""])[0].strip()


def _reason(form: dict[str, list[str]]) -> str:
    reason = one(form, "reason")
    if not reason or len(reason) > 500:
        raise FormRejected("a reason (1-500 characters) is required")
    return reason


def dead_letter_filter(values: dict[str, str]) -> DeadLetterFilter:
    status = values.get("status") or None
    if status is not None and not (status.isascii() and status.isdigit() and len(status) == 3):
        raise BadRequest("status must be a three-digit HTTP status code")
    error_class = values.get("errorClass") or None
    if error_class is not None and error_class not in ERROR_CLASSES:
        raise BadRequest(f"errorClass must be one of {', '.join(ERROR_CLASSES)}")
    return DeadLetterFilter(
        tenant_id=values.get("tenant") or None,
        since=validation.timestamp("since", values.get("since") or None),
        until=validation.timestamp("until", values.get("until") or None),
        event_type=values.get("eventType") or None,
        status_code=int(status) if status else None,
        error_class=cast(ErrorClass | None, error_class),  # checked against the Literal above
    )


async def overview(request: Request) -> Response:
    async with request.app.state.pool.acquire() as conn:
        o = await store.overview(conn)
        counts = await store.deliveries_per_minute(conn, minutes=60)
    now = datetime.now(UTC)
    return page(
        request,
        "overview.html",
        o=o,
        depth_cap=store.DEPTH_CAP,
        oldest=age(o.oldest_due),
        chart=chart(counts, now=now),
        total=sum(c.n for c in counts),
        refresh=10,
    )


async def dead_letters(
    request: Request,
    *,
    preview: int | None = None,
    reason: str = "",
    values: dict[str, str] | None = None,
) -> Response:
    q = request.query_params
    values = values if values is not None else {k: q.get(k, "") for k in FILTER_FIELDS}
    flt = dead_letter_filter(values)
    cursor = validation.decode_cursor(q.get("cursor")) if preview is None else None
    async with request.app.state.pool.acquire() as conn:
        letters, nxt = await list_dead_letters(
            conn, flt, after=(cursor.updated_at, cursor.id) if cursor else None, limit=100
        )
    rows = [
        {"letter": d, "failed": when(d.failed_at), "error_class": d.error_class} for d in letters
    ]
    return page(
        request,
        "dead_letters.html",
        f=values,
        rows=rows,
        error_classes=ERROR_CLASSES,
        next_cursor=validation.encode_cursor(Cursor(*nxt) if nxt else None),
        query=urlencode({k: v for k, v in values.items() if v}),
        preview=preview,
        reason=reason,
    )


async def preview_replay(request: Request) -> Response:
    form = await posted(request)
    reason = _reason(form)
    values = {k: one(form, k) for k in FILTER_FIELDS}
    async with request.app.state.pool.acquire() as conn:
        count = await ops.preview_replay(conn, dead_letter_filter(values))
    return await dead_letters(request, preview=count, reason=reason, values=values)


async def bulk_replay(request: Request) -> Response:
    form = await posted(request)
    reason = _reason(form)
    if one(form, "confirm") != "yes":
        raise FormRejected("preview the bulk replay first, then confirm it")
    flt = dead_letter_filter({k: one(form, k) for k in FILTER_FIELDS})
    async with request.app.state.pool.acquire() as conn:
        done = await ops.bulk_replay(conn, flt, actor=ACTOR, reason=reason)
    return back("/ops/dead-letters", f"Replayed {done:,} dead letter(s).")


async def replay_selected(request: Request) -> Response:
    form = await posted(request)
    reason = _reason(form)
    ids = [i for i in form.get("eventId", []) if i]
    if not ids or len(ids) > 1000:
        raise FormRejected("select between 1 and 1,000 dead letters")
    async with request.app.state.pool.acquire() as conn:
        done = await ops.replay_selected(conn, ids, actor=ACTOR, reason=reason)
    return back("/ops/dead-letters", f"Replayed {done:,} of {len(ids):,} selected.")


async def replay_event(request: Request) -> Response:
    form = await posted(request)
    event_id = request.path_params["event_id"]
    async with request.app.state.pool.acquire() as conn:
        done = await ops.replay_selected(conn, [event_id], actor=ACTOR, reason=_reason(form))
    return back(f"/ops/events/{event_id}", "Replayed." if done else "Already replayed.")


def attempt_rows(attempts: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            **{k: getattr(a, k) for k in a.__slots__},
            "at": when(a.attempted_at),
            "unix": int(a.attempted_at.timestamp()),
        }
        for a in attempts
    ]


async def event(request: Request) -> Response:
    event_id = request.path_params["event_id"]
    async with request.app.state.pool.acquire() as conn:
        e = await store.event(conn, event_id=event_id)
        attempts = await store.event_attempts(conn, event_id=event_id)
    if e is None and not attempts:
        return page(
            request,
            "message.html",
            404,
            heading="Not found",
            text=f"No event {event_id} is known (it may have passed retention).",
        )
    try:
        body = json.dumps(json.loads(e.body), indent=2, ensure_ascii=False) if e else ""
    except ValueError:
        body = e.body if e else ""
    return page(
        request,
        "event.html",
        event_id=event_id,
        e=e,
        created=when(e.created_at) if e else "",
        body=body,
        task_id=None,
        attempts=attempt_rows(attempts),
    )


async def task(request: Request) -> Response:
    task_id = request.path_params["task_id"]
    async with request.app.state.pool.acquire() as conn:
        t = await get_task(conn, task_id, tenant_id=None)
        if t is None:
            return page(
                request, "message.html", 404, heading="Not found", text=f"No task {task_id}."
            )
        attempts = await store.event_attempts(conn, event_id=t.event_id) if t.event_id else []
    resource = json.dumps(t.to_resource(), indent=2, ensure_ascii=False)
    return page(request, "task.html", t=t, resource=resource, attempts=attempt_rows(attempts))


async def redeliver_task(request: Request) -> Response:
    await posted(request)
    task_id = request.path_params["task_id"]
    async with request.app.state.pool.acquire() as conn:
        try:
            await redeliver(conn, task_id, tenant_id=None, by=ACTOR)
        except OutboxError as exc:
            return back(f"/ops/tasks/{task_id}", f"Not redelivered: {exc}")
    return back(f"/ops/tasks/{task_id}", "Queued for redelivery.")


async def destinations(request: Request) -> Response:
    async with request.app.state.pool.acquire() as conn:
        found = await destination_store.list_destinations(conn, limit=500)
    rows = [{**{k: getattr(d, k) for k in d.__slots__}, "probe": when(d.probe_at)} for d in found]
    return page(request, "destinations.html", rows=rows, refresh=15)


async def close_circuit(request: Request) -> Response:
    form = await posted(request)
    host, reason = one(form, "host"), _reason(form)
    async with request.app.state.pool.acquire() as conn:
        closed = await ops.close_circuit(conn, host, actor=ACTOR, reason=reason)
    return back("/ops/destinations", f"Closed {host}." if closed else f"{host} was not open.")


async def tenants(request: Request, *, shown: list[tuple[str, str]] | None = None) -> Response:
    cursor = validation.decode_cursor(request.query_params.get("cursor"))
    async with request.app.state.pool.acquire() as conn:
        found, nxt = await list_tenants(
            conn, after=(cursor.updated_at, cursor.id) if cursor else None, limit=200
        )
    rows = [
        {"id": t.id, "name": t.name, "created": when(t.created_at), "secrets": t.secrets}
        for t in found
    ]
    return page(
        request,
        "tenants.html",
        rows=rows,
        shown=shown,
        next_cursor=validation.encode_cursor(Cursor(*nxt) if nxt else None),
    )


async def new_tenant(request: Request) -> Response:
    form = await posted(request)
    name = one(form, "name")
    if not name or len(name) > 200:
        raise FormRejected("a name of 1-200 characters is required")
    async with request.app.state.pool.acquire() as conn:
        t = await create_tenant(conn, name, request.app.state.secret_box)
    shown = [("tenant id", t.id), ("API key", t.api_key)]
    if t.signing_secret is not None:
        shown.append(("signing secret", t.signing_secret))
    if t.public_key is not None:
        shown.append(("public key", t.public_key))
    return await tenants(request, shown=shown)


async def tenant_rotate_secret(request: Request) -> Response:
    await posted(request)
    tenant_id = request.path_params["tenant_id"]
    overlap = request.app.state.settings.secret_overlap_s
    async with request.app.state.pool.acquire() as conn:
        rotated = await rotate_secret(conn, tenant_id, request.app.state.secret_box, overlap)
    # What the route answers: the new HMAC secret and/or Ed25519 public key.
    shown = [("tenant id", tenant_id)]
    if rotated.signing_secret is not None:
        shown.append(("new signing secret", rotated.signing_secret))
    if rotated.public_key is not None:
        shown.append(("new public key", rotated.public_key))
    return await tenants(request, shown=shown)


async def tenant_rotate_key(request: Request) -> Response:
    await posted(request)
    tenant_id = request.path_params["tenant_id"]
    async with request.app.state.pool.acquire() as conn:
        api_key = await rotate_api_key(conn, tenant_id)
    request.app.state.key_cache.evict_tenant(tenant_id)
    return await tenants(request, shown=[("tenant id", tenant_id), ("new API key", api_key)])


async def tenant_notifications(request: Request) -> Response:
    """A tenant's notification URL, the events it asked for, and its last notifications."""
    tenant_id = request.path_params["tenant_id"]
    async with request.app.state.pool.acquire() as conn:
        settings = await ops.get_notifications(conn, tenant_id)
        sent = await ops.recent_notifications(conn, tenant_id, limit=50)
    rows = [
        {"id": n.event_id, "type": n.event_type, "at": when(n.created_at), "state": n.state}
        for n in sent
    ]
    return page(
        request,
        "notifications.html",
        tenant_id=tenant_id,
        settings=settings,
        updated=when(settings.updated_at) if settings else "",
        rows=rows,
    )


async def audit(request: Request) -> Response:
    async with request.app.state.pool.acquire() as conn:
        entries = await store.audit_log(conn, limit=500)
    return page(request, "audit.html", rows=[{"entry": a, "when": when(a.at)} for a in entries])


async def search(request: Request) -> Response:
    q = request.query_params.get("q", "").strip()
    if q.startswith("task_"):
        return RedirectResponse(f"/ops/tasks/{q}", status_code=303)
    if q.startswith("evt_"):
        return RedirectResponse(f"/ops/events/{q}", status_code=303)
    if q.startswith("ten_"):
        return RedirectResponse(f"/ops/dead-letters?{urlencode({'tenant': q})}", status_code=303)
    return page(
        request,
        "message.html",
        404,
        heading="Nothing found",
        q=q,
        text="Search takes a task id (task_…), an event id (evt_…) or a tenant id (ten_…).",
    )
