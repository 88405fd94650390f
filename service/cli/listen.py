"""``hookrelay listen``: a local receiver that verifies, prints and answers each webhook.

For integrators trying hookrelay out: point a task's ``callbackUrl`` at it, watch
what arrives, make it fail on purpose (``--status 500``) to watch the retries, or
pass verified webhooks on to the app being written (``--forward``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from hookrelay.service.cli.listen_verify import Verdict, verifier_from_args

if TYPE_CHECKING:  # imported when listening: every other command of the CLI would pay it
    import httpx

# Headers a receiver needs to verify again; hop-by-hop ones are not passed on.
FORWARDED_HEADERS = ("content-type", "webhook-id", "webhook-timestamp", "webhook-signature")


@dataclass(frozen=True)
class Answer:
    status: int
    note: str


def add_parser(sub: Any) -> None:
    p = sub.add_parser("listen", help="a local webhook receiver that verifies and prints each one")
    p.add_argument("--port", type=int, default=9000, help="port on 127.0.0.1 (default 9000)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument(
        "--secret",
        action="append",
        help="the tenant's whsec_... signing secret: verify v1 signatures (repeat for a rotation)",
    )
    p.add_argument(
        "--public-key",
        action="append",
        help="the tenant's whpk_... public key: verify v1a signatures (repeat for a rotation)",
    )
    p.add_argument("--status", type=int, help="answer every verified webhook with this status")
    p.add_argument("--forward", metavar="URL", help="POST verified webhooks on to this URL")


def _when(raw: str | None) -> str:
    if raw is None or not raw.isdigit():
        return "no timestamp"
    return datetime.fromtimestamp(int(raw), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _describe(body: bytes) -> tuple[str, str]:
    """The event type and a readable body (indented JSON when it parses)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return "?", body.decode("utf-8", "replace")
    kind = parsed.get("type", "?") if isinstance(parsed, dict) else "?"
    return str(kind), json.dumps(parsed, indent=2, ensure_ascii=False)


class Listener:
    """The aiohttp handler: verify, print, forward, answer."""

    def __init__(self, args: argparse.Namespace, client: httpx.AsyncClient) -> None:
        self.verifier = verifier_from_args(args)
        self.status: int | None = args.status
        self.forward: str | None = args.forward
        self.client = client

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        verdict = self.verifier(headers, body)
        answer = await self._answer(verdict, headers, body)
        kind, text = _describe(body)
        print(
            f"--> {request.method} {request.path_qs}  {headers.get('webhook-id', 'no webhook-id')}"
            f"  {kind}  {_when(headers.get('webhook-timestamp'))}\n"
            f"    {verdict.text}\n{_indent(text)}\n<-- {answer.status} {answer.note}\n",
            flush=True,
        )
        return web.json_response({"received": verdict.ok}, status=answer.status)

    async def _answer(self, verdict: Verdict, headers: dict[str, str], body: bytes) -> Answer:
        if verdict.checked and not verdict.ok:
            # What a correct endpoint does with a bad signature; hookrelay will retry it.
            return Answer(400, "(signature not verified)")
        if self.status is not None:
            return Answer(self.status, "(--status)")
        if self.forward is None:
            return Answer(204, "")
        import httpx

        sent = {k: v for k, v in headers.items() if k in FORWARDED_HEADERS}
        try:
            r = await self.client.post(self.forward, content=body, headers=sent)
        except httpx.HTTPError as exc:
            return Answer(502, f"(forward to {self.forward} failed: {exc or type(exc).__name__})")
        # The app's own answer goes back to hookrelay, so its failures are retried.
        return Answer(r.status_code, f"(from {self.forward})")


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


async def serve(args: argparse.Namespace) -> None:
    """Listen until SIGINT or SIGTERM."""
    import httpx

    async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
        listener = Listener(args, client)
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", listener.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, args.host, args.port).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        where = f"http://{args.host}:{args.port}/"
        print(f"Ready: webhooks to {where} (any path) are printed here. {listener.verifier.banner}")
        if args.forward:
            print(f"Verified webhooks are forwarded to {args.forward}.")
        print("Ctrl-C to stop.\n", flush=True)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()


def main(args: argparse.Namespace) -> int:
    """Entry point of ``hookrelay listen``; exit status 2 for bad options."""
    if args.forward and not (args.secret or args.public_key):
        print(
            "hookrelay listen: --forward needs --secret or --public-key "
            "(only verified webhooks are forwarded)",
            file=sys.stderr,
        )
        return 2
    if args.status is not None and not 100 <= args.status <= 599:
        print("hookrelay listen: --status must be an HTTP status from 100 to 599", file=sys.stderr)
        return 2
    try:
        verifier_from_args(args)
    except ValueError as exc:
        print(f"hookrelay listen: {exc}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args))
    return 0
