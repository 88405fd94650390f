"""``hookrelay tenants create|list|rotate-key``: tenant administration from a terminal."""

from __future__ import annotations

import argparse
import json
from typing import Any, get_args

import asyncpg

from hookrelay.outbox.models import SignatureScheme, iso
from hookrelay.outbox.tenants import create_tenant, list_tenants, rotate_api_key
from hookrelay.service.server.prerequisites import Runtime
from hookrelay.service.server.tty_text import printable

PAGE = 1000


def add_parser(sub: Any) -> None:
    tenants = sub.add_parser("tenants", help="create, list and re-key tenants")
    actions = tenants.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a tenant; prints its credentials once")
    create.add_argument("name")
    create.add_argument(
        "--scheme",
        choices=get_args(SignatureScheme),
        default="v1",
        help="signatures its webhooks carry: v1 (HMAC), v1a (Ed25519) or both",
    )
    ls = actions.add_parser("list", help="every tenant, oldest first")
    rotate = actions.add_parser(
        "rotate-key", help="issue a new API key; the old one stops working at once"
    )
    rotate.add_argument("tenant_id", metavar="TENANT_ID")
    for parser in (create, ls, rotate):
        parser.add_argument("--json", action="store_true", help="machine-readable output")


def _table(rows: list[dict[str, Any]]) -> str:
    cols = ["id", "name", "createdAt", "secretCount"]
    cells = [[printable(r[c])[:60] for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)),
        "  ".join("-" * w for w in widths),
        *("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells),
    ]
    return "\n".join(lines)


async def run(conn: asyncpg.Connection, args: argparse.Namespace, runtime: Runtime) -> int:
    """Carry out one ``tenants`` action; the exit status."""
    if args.action == "create":
        t = await create_tenant(conn, args.name, runtime.secret_box, args.scheme)
        if args.json:
            print(json.dumps(t.to_resource()))
        else:
            lines = [f"tenant id:       {t.id}", f"name:            {printable(t.name)}"]
            lines.append(f"api key:         {t.api_key}")
            if t.signing_secret is not None:
                lines.append(f"signing secret:  {t.signing_secret}")
            if t.public_key is not None:
                lines.append(f"public key:      {t.public_key}   (v1a: receivers verify with it)")
            print("\n".join([*lines, "(shown once: store them now)"]))
        return 0
    if args.action == "list":
        rows: list[dict[str, Any]] = []
        after = None
        while True:
            page, after = await list_tenants(conn, after=after, limit=PAGE)
            rows += [
                {
                    "id": t.id,
                    "name": t.name,
                    "createdAt": iso(t.created_at),
                    "secretCount": t.secrets,
                }
                for t in page
            ]
            if after is None:
                break
        if args.json:
            for r in rows:
                print(json.dumps(r))
        else:
            print(_table(rows) if rows else "no tenants yet")
        return 0
    api_key = await rotate_api_key(conn, args.tenant_id)
    if args.json:
        print(json.dumps({"id": args.tenant_id, "apiKey": api_key}))
    else:
        print(
            f"tenant id:  {printable(args.tenant_id)}\nnew api key: {api_key}\n"
            "(shown once; the old key no longer works)"
        )
    return 0
