"""The ``hookrelay`` command: one parser for every subcommand, and the failure of any of
them as an exit status and one line (:mod:`.failures`).

The subcommands' own modules: :mod:`.database` (``migrate``, ``master-key``),
:mod:`.dead_letters`, :mod:`.tenants`, :mod:`.listen` (a local receiver). ``serve``,
``api`` and ``dispatch`` run :mod:`hookrelay.service.server.processes`.

The top layer of the service: it may import every other package of it and the outbox.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from typing import Any, NoReturn

from hookrelay.outbox.store import create_pool
from hookrelay.service.api.release import release
from hookrelay.service.cli import database as database_cli
from hookrelay.service.cli import dead_letters as deadletters_cli
from hookrelay.service.cli import failures, listen
from hookrelay.service.cli import tenants as tenants_cli
from hookrelay.service.server import event_loop as serving
from hookrelay.service.server import logs
from hookrelay.service.server.open_database import open_database
from hookrelay.service.server.prerequisites import Runtime, absolute, open_dsn, prepare
from hookrelay.service.server.settings import Settings
from hookrelay.service.server.supervisor import MAX_DEFAULT_WORKERS
from hookrelay.service.server.tty_text import fail, one_line

log = logging.getLogger("hookrelay")
DESCRIPTION = (
    "hookrelay: webhook delivery with a transactional outbox, signed callbacks and dead letters."
)
SERVICES = frozenset({"serve", "api", "dispatch"})
EPILOG = """\
Settings come from the environment, not from flags or files: DATABASE_URL (unset: an
embedded PostgreSQL under HOOKRELAY_DATA_DIR, default ./.hookrelay), HOOKRELAY_MASTER_KEY,
HOOKRELAY_ADMIN_TOKEN and the other HOOKRELAY_* variables listed in the README.
Only `serve` and `migrate` create a data directory. `hookrelay COMMAND --help` for more.
"""


async def _dead_letters(settings: Settings, args: argparse.Namespace) -> int:
    # Needs neither the master key nor the admin token: only the database.
    dsn, server = open_dsn(absolute(settings), may_create=False)
    try:
        pool = await create_pool(
            dsn,
            max_size=1,
            wait_s=settings.db_wait_s,
            prepared_statements=True if server else settings.prepared_statements_choice(),
        )
        try:
            async with pool.acquire() as conn:
                return await deadletters_cli.run(conn, args)
        finally:
            await pool.close()
    finally:
        if server is not None:
            server.stop()


async def _tenants(runtime: Runtime, args: argparse.Namespace) -> int:
    if args.action == "create":
        await open_database(runtime)
    pool = await runtime.open_pool(max_size=1)
    try:
        async with pool.acquire() as conn:
            return await tenants_cli.run(conn, args, runtime)
    finally:
        await pool.close()


def _port(raw: str) -> int:
    try:
        port = int(raw)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"expected a port number 1..65535, got {raw!r}")
    return port


def _count(raw: str) -> int:
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {raw!r}")
    return count


def _listen_options(parser: argparse.ArgumentParser, *, workers: str) -> None:
    parser.add_argument("--host", help="address to listen on (default: HOOKRELAY_HOST, 127.0.0.1)")
    parser.add_argument(
        "--port", type=_port, help="port to listen on (default: HOOKRELAY_PORT, 8000)"
    )
    parser.add_argument(
        "--workers",
        type=_count,
        metavar="N",
        help=f"API worker processes sharing the port (default: HOOKRELAY_WORKERS, {workers})",
    )


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line too (subcommand parsers are of this class as well)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {one_line(message)} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="hookrelay",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"hookrelay {release()}")
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log lines (JSON) from one-shot commands too; -vv for debug",
    )
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    _listen_options(
        sub.add_parser("serve", help="API + dispatcher + sweeper in one process"),
        workers="1",
    )
    _listen_options(
        sub.add_parser("api", help="the HTTP API only"),
        workers=f"one per CPU, at most {MAX_DEFAULT_WORKERS}",
    )
    sub.add_parser("dispatch", help="the dispatcher only (run as many as you like)")
    database_cli.add_parsers(sub)
    tenants_cli.add_parser(sub)
    deadletters_cli.add_parser(sub)
    listen.add_parser(sub)
    return p


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    # -v is accepted after the command too (`hookrelay migrate -v`).
    for arg in extra:
        if arg in {"-v", "--verbose"} or (arg.startswith("-v") and set(arg[1:]) == {"v"}):
            args.verbose += 1 if arg == "--verbose" else len(arg) - 1
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env()
    if getattr(args, "host", None):
        settings = replace(settings, host=args.host)
    if getattr(args, "port", None) is not None:
        settings = replace(settings, port=args.port)
    if getattr(args, "workers", None) is not None:
        settings = replace(settings, workers=args.workers)
    return settings


def _configure_logs(args: argparse.Namespace, settings: Settings) -> None:
    if args.command in SERVICES:
        logs.configure("DEBUG" if args.verbose else settings.log_level)
    elif args.verbose:
        logs.configure("DEBUG" if args.verbose > 1 else "INFO")
    else:
        logs.configure("WARNING", json_lines=False)


def _one_shot(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "dead-letters":
        return serving.run(_dead_letters(settings, args))
    jobs: dict[str, Callable[[Runtime], Coroutine[Any, Any, int | None]]] = {
        "migrate": lambda rt: database_cli.run_migrate(rt, args),
        "master-key": database_cli.run_rotate,
        "tenants": lambda rt: _tenants(rt, args),
    }
    runtime = prepare(settings, may_create=args.command == "migrate", needs_token=False)
    try:
        return serving.run(jobs[args.command](runtime)) or 0
    finally:
        runtime.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.command == "listen":
        # A receiver on the integrator's side: no database, no hookrelay settings.
        return listen.main(args)
    settings: Settings | None = None
    # Until a command installs its own handling, SIGTERM interrupts like Ctrl-C,
    # so the embedded server is let go of on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        settings = _settings(args)
        _configure_logs(args, settings)
        if args.command not in SERVICES:
            return _one_shot(args, settings)
        # Only the services import the server's parts (the API and its templates, the
        # dispatcher's run): a one-shot command does without them.
        from hookrelay.service.server import processes as commands

        if args.command == "dispatch":
            serving.run(commands.dispatch(settings))
        else:
            serving.run(commands.serve(settings, with_dispatcher=args.command == "serve"))
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        # Output piped into e.g. `head`: stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        code, message = failures.explain(exc)
        if args.verbose:
            log.exception("%s failed", args.command)
        hidden = () if settings is None else (settings.admin_token, settings.master_key)
        fail(message, secrets=hidden)
        return code
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
