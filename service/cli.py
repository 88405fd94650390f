"""The ``hookrelay`` command: serve, api, dispatch, migrate, tenants."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import uvicorn

from outbox.db import create_pool
from outbox.errors import OutboxError
from outbox.sweeper import sweeping

from . import database_cli, deadletters_cli, logs, serving, tenants_cli
from .app import create_app
from .errors import ApiError
from .runtime import Runtime, prepare
from .settings import Settings
from .startup import open_database
from .workers import dispatcher_background, make_dispatcher, sweeper_background

log = logging.getLogger("hookrelay")


async def _migrate(runtime: Runtime) -> None:
    # Migrations, then the master key check: a wrong key refuses to start here.
    await open_database(runtime)


def _banner(runtime: Runtime) -> None:
    s = runtime.settings
    where = f"embedded PostgreSQL in {s.data_dir / 'pg'}" if runtime.embedded else "DATABASE_URL"
    print(f"hookrelay listening on http://{s.host}:{s.port} (database: {where})", flush=True)
    if runtime.admin_token_created:
        print(
            "\nFirst run: an admin token was generated and saved to "
            f"{s.data_dir / 'admin-token'}\n\n  HOOKRELAY_ADMIN_TOKEN={runtime.admin_token}\n\n"
            "Create a tenant with:\n"
            f"  curl -s -X POST http://{s.host}:{s.port}/v1/admin/tenants \\\n"
            f"       -H 'Authorization: Bearer {runtime.admin_token}' \\\n"
            "       -H 'content-type: application/json' -d '{\"name\": \"acme\"}'\n"
            "or: hookrelay tenants create acme\n",
            flush=True,
        )


async def _serve(runtime: Runtime, *, with_dispatcher: bool) -> None:
    await _migrate(runtime)
    background = (
        [dispatcher_background(runtime), sweeper_background(runtime)] if with_dispatcher else []
    )
    app = create_app(runtime, background=background)
    s = runtime.settings
    config = serving.uvicorn_config(
        app, host=s.host, port=s.port, graceful_s=int(s.http_timeout_s) + 5
    )
    _banner(runtime)
    await uvicorn.Server(config).serve()


async def _dispatch(runtime: Runtime) -> None:
    await _migrate(runtime)
    pool = await create_pool(
        runtime.dsn,
        min_size=1,
        max_size=runtime.settings.db_pool_size,
        wait_s=runtime.settings.db_wait_s,
    )
    dispatcher = make_dispatcher(runtime, pool)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, dispatcher.stop)
    log.info("dispatcher %s started", dispatcher.config.owner)
    try:
        async with sweeping(pool, runtime.settings.sweep_interval_s, runtime.settings.retention()):
            await dispatcher.run()
    finally:
        await pool.close()


async def _dead_letters(runtime: Runtime, args: argparse.Namespace) -> int:
    pool = await create_pool(runtime.dsn, min_size=1, max_size=1, wait_s=runtime.settings.db_wait_s)
    try:
        async with pool.acquire() as conn:
            return await deadletters_cli.run(conn, args)
    finally:
        await pool.close()


async def _tenants(runtime: Runtime, args: argparse.Namespace) -> int:
    if args.action == "create":
        await _migrate(runtime)
    pool = await create_pool(runtime.dsn, min_size=1, max_size=1, wait_s=runtime.settings.db_wait_s)
    try:
        async with pool.acquire() as conn:
            return await tenants_cli.run(conn, args, runtime)
    finally:
        await pool.close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hookrelay", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="API + dispatcher + sweeper in one process")
    sub.add_parser("api", help="the HTTP API only")
    sub.add_parser("dispatch", help="the dispatcher only (run as many as you like)")
    database_cli.add_parsers(sub)
    tenants_cli.add_parser(sub)
    deadletters_cli.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except OutboxError as exc:
        print(f"hookrelay: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level)
    commands: dict[str, Callable[[Runtime], Coroutine[Any, Any, None]]] = {
        "serve": lambda rt: _serve(rt, with_dispatcher=True),
        "api": lambda rt: _serve(rt, with_dispatcher=False),
        "dispatch": _dispatch,
        "migrate": lambda rt: database_cli.run_migrate(rt, args),
        "master-key": database_cli.run_rotate,
    }
    try:
        runtime = prepare(settings)
        if args.command == "dead-letters":
            return serving.run(_dead_letters(runtime, args))
        if args.command == "tenants":
            return serving.run(_tenants(runtime, args))
        with contextlib.suppress(KeyboardInterrupt):
            serving.run(commands[args.command](runtime))
    except ApiError as exc:
        print(f"hookrelay: {exc.message}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Output piped into e.g. `head`: stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OutboxError as exc:
        print(f"hookrelay: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
