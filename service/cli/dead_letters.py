"""``hookrelay dead-letters list|show|replay``: the ops workflow from a terminal."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import asyncpg

from hookrelay.outbox.errors import OutboxError
from hookrelay.outbox.models import iso
from hookrelay.outbox.ops import (
    NO_REASON,
    DeadLetter,
    DeadLetterFilter,
    bulk_replay,
    get_dead_letter,
    list_dead_letters,
    replay_audited,
    to_resource,
)
from hookrelay.service.api.validation import timestamp
from hookrelay.service.server.tty_text import printable

PAGE = 1000


def add_parser(sub: Any) -> None:
    p = sub.add_parser("dead-letters", help="inspect and replay dead letters")
    actions = p.add_subparsers(dest="action", required=True)
    ls = actions.add_parser("list", help="dead letters not yet replayed, oldest first")
    show = actions.add_parser("show", help="one dead letter with its attempt history")
    show.add_argument("event_id")
    show.add_argument("--json", action="store_true")
    replay = actions.add_parser("replay", help="put dead letters back into the outbox")
    replay.add_argument("event_ids", nargs="*", metavar="EVENT_ID")
    replay.add_argument("--all", action="store_true", help="every letter matching the filters")
    replay.add_argument("--dry-run", action="store_true", help="count, change nothing")
    replay.add_argument("--reason", default=NO_REASON, help="why, for the audit trail")
    for parser in (ls, replay):
        parser.add_argument("--tenant")
        parser.add_argument("--since", help="ISO-8601, e.g. 2026-12-02T13:00:00Z")
        parser.add_argument("--until")
        parser.add_argument("--event-type")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")


def _filter(args: argparse.Namespace) -> DeadLetterFilter:
    return DeadLetterFilter(
        tenant_id=args.tenant,
        since=timestamp("--since", args.since),
        until=timestamp("--until", args.until),
        event_type=args.event_type,
    )


async def _all(conn: asyncpg.Connection, flt: DeadLetterFilter) -> list[DeadLetter]:
    rows: list[DeadLetter] = []
    after = None
    while True:
        page, after = await list_dead_letters(conn, flt, after=after, limit=PAGE)
        rows += page
        if after is None:
            return rows


def _table(rows: list[dict[str, Any]]) -> str:
    cols = [
        "eventId",
        "tenantId",
        "eventType",
        "failedAt",
        "attempts",
        "lastStatusCode",
        "lastError",
    ]
    # Receiver-controlled text (lastError) is escaped, then cut: never a raw control byte.
    cells = [
        [printable(r.get(c) if r.get(c) is not None else "-")[:60] for c in cols] for r in rows
    ]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    line = "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
    body = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join([line, "  ".join("-" * w for w in widths), *body])


def _progress(done: int, total: int) -> None:
    width = 30
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    sys.stderr.flush()


async def run(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    if args.action == "list":
        rows = [to_resource(r) for r in await _all(conn, _filter(args))]
        if args.json:
            for r in rows:
                print(json.dumps(r))
        else:
            print(_table(rows) if rows else "no dead letters match")
            print(f"\n{len(rows)} dead letter(s)")
        return 0
    if args.action == "show":
        row, history = await get_dead_letter(conn, args.event_id)
        out = {
            **to_resource(row),
            "replayedAt": iso(row.replayed_at),
            "attemptHistory": [a.to_resource() for a in history],
        }
        print(json.dumps(out, indent=None if args.json else 2))
        return 0
    # replay
    if bool(args.event_ids) == bool(args.all):
        print("give EVENT_ID... or --all (with optional filters), not both", file=sys.stderr)
        return 2
    if args.event_ids:
        failed = 0
        for event_id in args.event_ids:
            if args.dry_run:
                await get_dead_letter(conn, event_id)
                print(f"would replay {printable(event_id)}")
                continue
            try:
                await replay_audited(conn, event_id, actor="cli", reason=args.reason)
                print(f"replayed {printable(event_id)}")
            except OutboxError as exc:
                print(printable(f"{event_id}: {exc}"), file=sys.stderr)
                failed += 1
        return 1 if failed else 0
    flt = _filter(args)
    total = len(await _all(conn, flt))
    if args.dry_run:
        print(f"would replay {total} dead letter(s)")
        return 0
    done = await bulk_replay(
        conn, flt, actor="cli", reason=args.reason, progress=lambda n: _progress(n, max(total, n))
    )
    if done:
        sys.stderr.write("\n")
    print(f"replayed {done} dead letter(s)")
    return 0
