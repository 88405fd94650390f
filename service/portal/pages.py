"""The portal's pages: overview, tasks and deliveries, dead letters, notifications,
signing keys and test events, each of the session's tenant only. Every handler takes
the request and the session's :class:`Partner`; every POST passes the console's
CSRF and origin check first, and what it changes is audited as ``portal:<tenant>``.
The work itself is the same outbox functions the API's routes call."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, get_args
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from hookrelay.outbox import ops
from hookrelay.outbox.errors import InvalidTransition
from hookrelay.outbox.keys import list_signing_keys, rotate_secret
from hookrelay.outbox.models import DeliveryStatus, TaskStatus
from hookrelay.outbox.ops import list_dead_letters
from hookrelay.outbox.portal import TaskFilter, task_page, tenant_overview
from hookrelay.outbox.store import events
from hookrelay.outbox.tasks import Cursor, get_task, get_test_event, send_test_event
from hookrelay.outbox.tasks import attempts as task_attempts
from hookrelay.outbox.tasks import redeliver as redeliver_task
from hookrelay.service.api import validation
from hookrelay.service.api.callback_url import check_callback_url
from hookrelay.service.api.errors import BadRequest, Unprocessable
from hookrelay.service.console.pages import (
    ERROR_CLASSES,
    attempt_rows,
    back,
    dead_letter_filter,
    one,
    posted,
)
from hookrelay.service.console.views import TEMPLATES, chart, render, templates_from, when
from hookrelay.service.live.sse_routes import tenant_stream
from hookrelay.service.portal.session import Partner

# The portal's own templates first, then the console's (attempts.html is shared).
templates = templates_from(Path(__file__).parent / "templates", TEMPLATES)

DELIVERY_STATES: tuple[str, ...] = get_args(DeliveryStatus)
TASK_FILTERS = ("status", "type", "delivery", "since", "until")
LETTER_FILTERS = ("since", "until", "eventType", "status", "errorClass")
MAX_REASON = 500


def _statuses() -> tuple[str, ...]:
    # TaskStatus is Literal[LiveStatus, TerminalStatus]: its arguments are Literals too.
    found: list[str] = []
    for part in get_args(TaskStatus):
        found.extend(get_args(part) or (part,))
    return tuple(found)


TASK_STATUSES: tuple[str, ...] = _statuses()


def show(
    request: Request, who: Partner | None, name: str, status_code: int = 200, **context: Any
) -> HTMLResponse:
    return render(templates, request, name, status_code, {**context, "partner": who})


def not_found(request: Request, who: Partner, text: str) -> HTMLResponse:
    return show(request, who, "message.html", 404, heading="Not found", text=text)


def _reason(form: dict[str, list[str]]) -> str:
    reason = one(form, "reason")
    if len(reason) > MAX_REASON:
        raise BadRequest(f"a reason is at most {MAX_REASON} characters")
    return reason or ops.NO_REASON


def _cursor(request: Request) -> tuple[datetime, str] | None:
    cursor = validation.decode_cursor(request.query_params.get("cursor") or None)
    return (cursor.updated_at, cursor.id) if cursor else None


def _next(position: tuple[datetime, str] | None) -> str | None:
    return validation.encode_cursor(Cursor(*position) if position else None)


# -- overview ------------------------------------------------------------------------


async def overview(request: Request, who: Partner) -> Response:
    async with request.app.state.pool.acquire() as conn:
        o = await tenant_overview(conn, who.tenant_id)
    now = datetime.now(UTC)
    rates = {w: o.success_rate(w) for w in ("hour", "day")}
    return show(
        request,
        who,
        "overview.html",
        o=o,
        rates={w: "–" if r is None else f"{r:.1%}" for w, r in rates.items()},
        p50="–" if o.durations.p50_ms is None else f"{o.durations.p50_ms:.0f} ms",
        p95="–" if o.durations.p95_ms is None else f"{o.durations.p95_ms:.0f} ms",
        chart=chart(o.per_hour, now=now, minutes=24, unit=timedelta(hours=1), per_unit="hour"),
        circuits=[{"c": c, "probe": when(c.probe_at)} for c in o.circuits],
        refresh=30,
    )


# -- tasks and deliveries ---------------------------------------------------------------


def _task_filter(values: dict[str, str]) -> TaskFilter:
    status, delivery, kind = values["status"] or None, values["delivery"] or None, values["type"]
    if status is not None and status not in TASK_STATUSES:
        raise BadRequest(f"status must be one of {', '.join(TASK_STATUSES)}")
    if delivery is not None and delivery not in DELIVERY_STATES:
        raise BadRequest(f"delivery must be one of {', '.join(DELIVERY_STATES)}")
    if len(kind) > 100:
        raise BadRequest("a task type is at most 100 characters")
    return TaskFilter(
        status=status,
        type=kind or None,
        delivery_status=delivery,
        since=validation.timestamp("since", values["since"] or None),
        until=validation.timestamp("until", values["until"] or None),
    )


async def tasks(request: Request, who: Partner) -> Response:
    values = {k: request.query_params.get(k, "").strip() for k in TASK_FILTERS}
    flt = _task_filter(values)
    async with request.app.state.pool.acquire() as conn:
        found, nxt = await task_page(conn, who.tenant_id, flt, before=_cursor(request))
    rows = [{"t": t, "updated": when(t.updated_at)} for t in found]
    return show(
        request,
        who,
        "tasks.html",
        f=values,
        rows=rows,
        statuses=TASK_STATUSES,
        delivery_states=DELIVERY_STATES,
        next_cursor=_next(nxt),
        query=urlencode({k: v for k, v in values.items() if v}),
        live=True,
    )


def _pretty(body: str | None) -> str:
    if body is None:
        return ""
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except ValueError:
        return body


async def task(request: Request, who: Partner) -> Response:
    task_id = request.path_params["task_id"]
    async with request.app.state.pool.acquire() as conn:
        t = await get_task(conn, task_id, tenant_id=who.tenant_id)
        if t is None:
            return not_found(request, who, f"No task {task_id} of yours.")
        body = await events.event_body(conn, event_id=t.event_id) if t.event_id else None
        log = await task_attempts(conn, t.id)
    return show(
        request,
        who,
        "task.html",
        t=t,
        updated=when(t.updated_at),
        body=_pretty(body),
        attempts=attempt_rows(log),
    )


async def redeliver(request: Request, who: Partner) -> Response:
    await posted(request)
    task_id = request.path_params["task_id"]
    async with request.app.state.pool.acquire() as conn:
        try:
            t = await redeliver_task(conn, task_id, tenant_id=who.tenant_id, by=who.actor)
        except InvalidTransition as exc:
            return back(f"/portal/tasks/{task_id}", f"Not redelivered: {exc}")
        await ops.record(
            conn,
            actor=who.actor,
            action="redeliver",
            what={"taskId": t.id, "eventId": t.event_id},
        )
    return back(f"/portal/tasks/{task_id}", "Queued for redelivery.")


async def live(request: Request, who: Partner) -> Response:
    """The task list's live part: the tenant's status stream, as ``GET /v1/events``."""
    return await tenant_stream(request, who.tenant_id)


# -- dead letters -------------------------------------------------------------------------


def _letter_values(source: Any) -> dict[str, str]:
    return {k: (source.get(k) or "").strip() for k in LETTER_FILTERS}


def _form_values(form: dict[str, list[str]]) -> dict[str, str]:
    return {k: one(form, k) for k in LETTER_FILTERS}


def _own_filter(who: Partner, values: dict[str, str]) -> ops.DeadLetterFilter:
    # The console's parsing, with the tenant always the session's.
    return dead_letter_filter({**values, "tenant": who.tenant_id})


async def dead_letters(
    request: Request,
    who: Partner,
    *,
    preview: int | None = None,
    reason: str = "",
    values: dict[str, str] | None = None,
) -> Response:
    values = values if values is not None else _letter_values(request.query_params)
    flt = _own_filter(who, values)
    after = _cursor(request) if preview is None else None
    async with request.app.state.pool.acquire() as conn:
        letters, nxt = await list_dead_letters(conn, flt, after=after, limit=50)
    rows = [{"letter": d, "failed": when(d.failed_at)} for d in letters]
    return show(
        request,
        who,
        "dead_letters.html",
        f=values,
        rows=rows,
        error_classes=ERROR_CLASSES,
        next_cursor=_next(nxt),
        query=urlencode({k: v for k, v in values.items() if v}),
        preview=preview,
        reason=reason,
    )


async def dead_letter(request: Request, who: Partner) -> Response:
    event_id = request.path_params["event_id"]
    async with request.app.state.pool.acquire() as conn:
        letter, history = await ops.get_dead_letter(conn, event_id, tenant_id=who.tenant_id)
        body = await events.event_body(conn, event_id=letter.event_id)
    return show(
        request,
        who,
        "dead_letter.html",
        d=letter,
        failed=when(letter.failed_at),
        replayed=when(letter.replayed_at),
        body=_pretty(body),
        attempts=attempt_rows(history),
    )


async def replay_one(request: Request, who: Partner) -> Response:
    form = await posted(request)
    event_id = request.path_params["event_id"]
    async with request.app.state.pool.acquire() as conn:
        await ops.replay_audited(
            conn, event_id, actor=who.actor, reason=_reason(form), tenant_id=who.tenant_id
        )
    return back(f"/portal/dead-letters/{event_id}", "Replayed: queued for delivery again.")


async def preview_replay(request: Request, who: Partner) -> Response:
    form = await posted(request)
    values = _form_values(form)
    async with request.app.state.pool.acquire() as conn:
        count = await ops.preview_replay(conn, _own_filter(who, values))
    return await dead_letters(request, who, preview=count, reason=_reason(form), values=values)


async def replay_range(request: Request, who: Partner) -> Response:
    form = await posted(request)
    if one(form, "confirm") != "yes":
        raise BadRequest("see how many would be replayed first, then confirm")
    flt = _own_filter(who, _form_values(form))
    async with request.app.state.pool.acquire() as conn:
        done = await ops.bulk_replay(conn, flt, actor=who.actor, reason=_reason(form))
    return back("/portal/dead-letters", f"Replayed {done:,} dead letter(s).")


# -- notifications -------------------------------------------------------------------------


async def notifications(request: Request, who: Partner, *, problem: str | None = None) -> Response:
    async with request.app.state.pool.acquire() as conn:
        settings = await ops.get_notifications(conn, who.tenant_id)
        sent = await ops.recent_notifications(conn, who.tenant_id, limit=50)
    rows = [
        {"id": n.event_id, "type": n.event_type, "at": when(n.created_at), "state": n.state}
        for n in sent
    ]
    return show(
        request,
        who,
        "notifications.html",
        settings=settings,
        updated=when(settings.updated_at) if settings else "",
        types=ops.NOTIFICATION_TYPES,
        rows=rows,
        problem=problem,
    )


async def _checked_url(request: Request, url: str) -> str:
    state = request.app.state
    try:
        return await check_callback_url(url, state.address_policy, state.submit_resolver)
    except Unprocessable as exc:
        raise Unprocessable(exc.message.replace("callbackUrl", "the URL", 1)) from exc


async def set_notifications(request: Request, who: Partner) -> Response:
    form = await posted(request)
    chosen = [t for t in form.get("events", []) if t in ops.NOTIFICATION_TYPES]
    if not chosen:
        return await notifications(request, who, problem="Choose at least one kind of event.")
    url = await _checked_url(request, one(form, "url"))
    async with request.app.state.pool.acquire() as conn:
        found = await ops.set_notifications(conn, who.tenant_id, url, chosen)
        await ops.record(
            conn,
            actor=who.actor,
            action="set_notifications",
            what={"url": found.url, "events": list(found.events)},
        )
    return back("/portal/notifications", "Notification settings saved.")


async def delete_notifications(request: Request, who: Partner) -> Response:
    await posted(request)
    async with request.app.state.pool.acquire() as conn:
        had = await ops.delete_notifications(conn, who.tenant_id)
        if had:
            await ops.record(conn, actor=who.actor, action="delete_notifications")
    return back("/portal/notifications", "Notifications stopped." if had else "None were set.")


async def test_notification(request: Request, who: Partner) -> Response:
    await posted(request)
    async with request.app.state.pool.acquire() as conn:
        settings = await ops.get_notifications(conn, who.tenant_id)
        if settings is None:
            return await notifications(request, who, problem="Set a notification URL first.")
        event_id = await send_test_event(conn, who.tenant_id, settings.url)
        await ops.record(
            conn,
            actor=who.actor,
            action="test_notification",
            what={"eventId": event_id, "url": settings.url},
        )
    return RedirectResponse(f"/portal/test-events/{event_id}", status_code=303)


# -- signing keys and test events -------------------------------------------------------


async def signing_keys(
    request: Request, who: Partner, *, shown: list[tuple[str, str]] | None = None
) -> Response:
    async with request.app.state.pool.acquire() as conn:
        scheme, keys = await list_signing_keys(conn, who.tenant_id)
    rows = [
        {
            "k": k,
            "created": when(k.created_at),
            "expires": when(k.expires_at) if k.expires_at else "",
        }
        for k in keys
    ]
    return show(request, who, "signing_keys.html", scheme=scheme, rows=rows, shown=shown)


async def rotate(request: Request, who: Partner) -> Response:
    await posted(request)
    state = request.app.state
    overlap = state.settings.secret_overlap_s
    async with state.pool.acquire() as conn:
        keys = await rotate_secret(conn, who.tenant_id, state.secret_box, overlap)
        await ops.record(conn, actor=who.actor, action="rotate_secret")
    until = when(datetime.now(UTC) + timedelta(seconds=overlap))
    shown = [("previous keys sign until", until)]
    if keys.signing_secret is not None:
        shown.insert(0, ("new signing secret", keys.signing_secret))
    if keys.public_key is not None:
        shown.insert(0, ("new public key", keys.public_key))
    return await signing_keys(request, who, shown=shown)


async def send_test(request: Request, who: Partner) -> Response:
    form = await posted(request)
    url = await _checked_url(request, one(form, "url"))
    async with request.app.state.pool.acquire() as conn:
        event_id = await send_test_event(conn, who.tenant_id, url)
        await ops.record(
            conn, actor=who.actor, action="test_event", what={"eventId": event_id, "url": url}
        )
    return RedirectResponse(f"/portal/test-events/{event_id}", status_code=303)


async def test_event(request: Request, who: Partner) -> Response:
    async with request.app.state.pool.acquire() as conn:
        found = await get_test_event(conn, who.tenant_id, request.path_params["event_id"])
    return show(
        request,
        who,
        "test_event.html",
        e=found,
        attempts=attempt_rows(found.attempts),
        refresh=2 if found.status == "pending" else None,
    )
