"""Rendering helpers: templates with autoescape, inert control characters, the chart."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.templating import Jinja2Templates

from hookrelay.outbox.errors import OutboxError
from hookrelay.outbox.ops import MinuteCount
from hookrelay.service.api.errors import ApiError, answer_for
from hookrelay.service.console.security import FormRejected, csrf_token, signed_in

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(value: object) -> str:
    """Control characters (terminal escapes, bidi overrides) shown as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


TEMPLATES = Path(__file__).parent / "templates"


def templates_from(*directories: Path) -> Jinja2Templates:
    """Templates looked up in ``directories`` in turn (the portal's, then the console's),
    every value escaped and shown :func:`printable` where a template says so."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(list(directories)),
        autoescape=True,  # every value is HTML-escaped unless marked safe
        undefined=jinja2.StrictUndefined,
    )
    env.filters["printable"] = printable
    return Jinja2Templates(env=env)


templates = templates_from(TEMPLATES)


def render(
    found: Jinja2Templates,
    request: Request,
    name: str,
    status_code: int,
    context: dict[str, Any],
) -> HTMLResponse:
    """A page of ``found``, with what every page has: the notice, the CSRF token."""
    ctx = {
        "refresh": None,
        "notice": request.query_params.get("notice"),
        "problem": None,
        "q": None,
        **context,
    }
    ctx["csrf"] = csrf_token(request)
    return found.TemplateResponse(request, name, ctx, status_code=status_code)


def page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return render(
        templates, request, name, status_code, {**context, "signed_in": signed_in(request)}
    )


async def as_page(
    request: Request, call: Awaitable[Response], message: Callable[[int, str], Response]
) -> Response:
    """``call``'s answer, or its refusal as a page by ``message(status, text)``: never
    JSON, never a trace."""
    try:
        return await call
    except FormRejected as exc:
        return message(400, str(exc))
    except ApiError as exc:
        return message(exc.status, exc.message)
    except OutboxError as exc:
        found = answer_for(exc)
        return message(found.status if found else 500, str(exc) or type(exc).__name__)


def when(ts: datetime | None) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ts else "–"


def age(delta: timedelta | None) -> str:
    if delta is None:
        return "none due"
    s = int(delta.total_seconds())
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


COLOURS = {"delivered": "#1f8a4c", "retry": "#b7791f", "dead": "#c53030"}


def chart(
    counts: list[MinuteCount],
    *,
    now: datetime,
    minutes: int = 60,
    unit: timedelta = timedelta(minutes=1),
    per_unit: str = "minute",
) -> str:
    """Stacked bars per minute (or per ``unit``: each count's ``minute`` is then the
    start of its unit), as SVG built from numbers only (no outside text)."""
    top = now.replace(second=0, microsecond=0)
    if unit >= timedelta(hours=1):
        top = top.replace(minute=0)
    start = top - unit * (minutes - 1)
    per: defaultdict[int, dict[str, int]] = defaultdict(dict)
    for c in counts:
        slot = int((c.minute - start) // unit)
        if 0 <= slot < minutes and c.minute >= start:
            per[slot][c.outcome] = per[slot].get(c.outcome, 0) + c.n
    peak = max([sum(v.values()) for v in per.values()] or [1])
    width, height, bar = minutes * 10, 150, 8
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height + 2}" role="img" '
        f'aria-label="deliveries per {per_unit}, peak {peak}" preserveAspectRatio="none">'
    ]
    for slot in range(minutes):
        y = float(height)
        for outcome in ("delivered", "retry", "dead"):
            n = per.get(slot, {}).get(outcome, 0)
            if not n:
                continue
            h = height * n / peak
            y -= h
            parts.append(
                f'<rect x="{slot * 10 + 1}" y="{y:.1f}" width="{bar}" height="{h:.1f}" '
                f'fill="{COLOURS[outcome]}"><title>{n} {outcome}</title></rect>'
            )
    parts.append(f'<line x1="0" y1="{height}" x2="{width}" y2="{height}" stroke="#b8c0cc"/>')
    parts.append("</svg>")
    return "".join(parts)
