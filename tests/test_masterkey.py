"""The master key belongs to the database: refusal at start, rotation, one bad tenant isolated."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
from dataclasses import replace
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from hookrelay.outbox import complete_task
from hookrelay.outbox.dispatch.dispatcher import UNDECRYPTABLE, running
from hookrelay.outbox.errors import ConfigurationError
from hookrelay.outbox.keys import at_rest
from hookrelay.outbox.keys.at_rest import KEY_FILE, SecretBox, key_id, parse_master_key
from hookrelay.outbox.keys.master_key import MasterKeyMismatch, recorded_key_id, verify_or_record
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import active_secrets, create_tenant
from hookrelay.service.cli.database import NEW_KEY_VAR
from tests.support import (
    backlog,
    cli_env,
    dispatcher,
    dispatcher_env,
    eventually,
    free_port,
    run_cli,
    start,
    v1_secret,
    wait_drained,
    wait_for_port,
)

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


def new_key() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def keyless_env(runtime, dsn: str, data_dir) -> dict[str, str]:
    env = dispatcher_env(runtime, dsn, data_dir=str(data_dir))
    del env["HOOKRELAY_MASTER_KEY"]
    return env


async def corrupt_secret(pool, tenant_id: str) -> None:
    """Flip one ciphertext byte of the tenant's stored secret: AES-GCM refuses it."""
    await pool.execute(
        "UPDATE signing_secrets SET secret_enc = set_byte(secret_enc, 20,"
        " get_byte(secret_enc, 20) # 255) WHERE tenant_id = $1",
        tenant_id,
    )


async def refused(command: str, env: dict[str, str]) -> list[str]:
    """Run ``command``, expect it to exit non-zero at once; its stderr lines."""
    proc = await start(command, env)
    assert proc.stderr is not None
    err = await asyncio.wait_for(proc.stderr.read(), 30)
    code = await proc.wait()
    assert code != 0, err.decode()
    return [line for line in err.decode().splitlines() if line.strip()]


async def test_second_data_dir_without_key_is_refused(runtime, dsn, tmp_path) -> None:
    # Each container has a data directory (an empty volume) and no key.
    first, second = tmp_path / "api", tmp_path / "dispatch"
    first.mkdir()
    second.mkdir()
    port = free_port()
    api = await start("api", {**keyless_env(runtime, dsn, first), "HOOKRELAY_PORT": str(port)})
    try:
        await wait_for_port(port, api)
    finally:
        api.terminate()
        await api.wait()
    expected = key_id(parse_master_key((first / KEY_FILE).read_text()))

    lines = await refused("dispatch", keyless_env(runtime, dsn, second))
    assert len(lines) == 1, lines
    assert "HOOKRELAY_MASTER_KEY" in lines[0] and expected in lines[0]
    assert not (second / KEY_FILE).exists(), "the refused key was left behind"

    wrong = new_key()
    lines = await refused(
        "dispatch", {**keyless_env(runtime, dsn, second), "HOOKRELAY_MASTER_KEY": wrong}
    )
    assert len(lines) == 1 and expected in lines[0]
    assert key_id(parse_master_key(wrong)) in lines[0]

    # The shared key, given: the dispatcher runs (and is stopped by us, not by itself).
    shared = {
        **keyless_env(runtime, dsn, second),
        "HOOKRELAY_MASTER_KEY": (first / KEY_FILE).read_text().strip(),
        "HOOKRELAY_LOG_LEVEL": "INFO",
    }
    proc = await start("dispatch", shared)
    try:
        assert proc.stderr is not None
        # Logged once its signal handlers are in place: a SIGTERM now is a clean stop.
        while b"started" not in (line := await asyncio.wait_for(proc.stderr.readline(), 60)):
            assert line, "the dispatcher exited instead of starting"
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(proc.wait(), 0.5)
    finally:
        proc.terminate()
        assert await proc.wait() == 0


async def test_key_check_recorded_once_and_verified(pool, runtime) -> None:
    async with pool.acquire() as conn:
        assert await recorded_key_id(conn) is None
        first = await verify_or_record(conn, runtime.secret_box)
        assert first.recorded and first.key_id == runtime.secret_box.key_id
        assert await recorded_key_id(conn) == runtime.secret_box.key_id
        again = await verify_or_record(conn, runtime.secret_box)
        assert not again.recorded
        other = SecretBox(secrets.token_bytes(32))
        with pytest.raises(MasterKeyMismatch) as caught:
            await verify_or_record(conn, other)
        assert runtime.secret_box.key_id in str(caught.value) and "\n" not in str(caught.value)


async def test_rotate_reencrypts_and_the_new_key_delivers(pool, runtime, dsn, receiver) -> None:
    env = cli_env(runtime, dsn)
    code, out, err = await run_cli("tenants", "create", "acme", "--json", env=env)
    assert code == 0, err
    tenant = json.loads(out)
    async with pool.acquire() as conn:
        task, _ = await create_task(conn, tenant["id"], NewTask("t", receiver.url))
        event_id = (await complete_task(conn, task.id, "succeeded")).event_id

    code, out, err = await run_cli("master-key", "rotate", env=env)
    assert code != 0 and "HOOKRELAY_NEW_MASTER_KEY" in err
    new = new_key()
    new_id = key_id(parse_master_key(new))
    code, out, err = await run_cli(
        "master-key", "rotate", env={**env, "HOOKRELAY_NEW_MASTER_KEY": new}
    )
    assert code == 0, err
    assert f"{runtime.secret_box.key_id} -> {new_id}" in out and "HOOKRELAY_MASTER_KEY" in out
    assert new not in out, "the new key must not be printed"

    async with pool.acquire() as conn:
        assert await recorded_key_id(conn) == new_id
        found = await active_secrets(conn, [tenant["id"]], SecretBox(parse_master_key(new)))
        assert found[tenant["id"]].values == [tenant["signingSecret"]]

    lines = await refused("dispatch", dispatcher_env(runtime, dsn))  # still the old key
    assert len(lines) == 1 and new_id in lines[0]

    proc = await start("dispatch", {**dispatcher_env(runtime, dsn), "HOOKRELAY_MASTER_KEY": new})
    try:
        await receiver.wait_for(1, timeout=30)
    finally:
        proc.terminate()
        await proc.wait()
    got = receiver.received[0]
    assert got.headers["webhook-id"] == event_id
    Webhook(tenant["signingSecret"]).verify(got.body, got.headers)


async def test_one_tenants_corrupted_secret_does_not_stop_the_others(
    pool, runtime, receiver
) -> None:
    good, good_events = await backlog(pool, runtime, receiver.url, 3)
    async with pool.acquire() as conn:
        bad = await create_tenant(conn, "globex", runtime.secret_box)
    _, bad_events = await backlog(pool, runtime, receiver.url, 3, tenant=bad)
    await corrupt_secret(pool, bad.id)
    async with pool.acquire() as conn:
        with pytest.raises(ConfigurationError, match="cannot decrypt"):
            await active_secrets(conn, [bad.id], runtime.secret_box)

    async with running(dispatcher(runtime, pool)) as d:
        await receiver.wait_for(3)
        await wait_drained(pool)
    assert sorted(r.headers["webhook-id"] for r in receiver.received) == sorted(good_events)
    for r in receiver.received:
        Webhook(v1_secret(good)).verify(r.body, r.headers)
    dead = await pool.fetch("SELECT event_id, last_error FROM dead_letters")
    assert sorted(r["event_id"] for r in dead) == sorted(bad_events)
    assert all(r["last_error"] == UNDECRYPTABLE for r in dead)
    assert d.counters["undecryptable"] == 3 and d.counters["delivered"] == 3


async def test_dispatcher_whose_key_was_rotated_away_holds_events(pool, runtime, receiver) -> None:
    async with pool.acquire() as conn:
        await verify_or_record(conn, runtime.secret_box)
    await backlog(pool, runtime, receiver.url, 3)
    stale = replace(runtime, secret_box=SecretBox(secrets.token_bytes(32)))
    async with running(dispatcher(stale, pool)) as d:
        await eventually(lambda: d.counters["held_wrong_key"] >= 3, 30)
    assert not receiver.received
    assert await pool.fetchval("SELECT count(*) FROM dead_letters") == 0
    left = await pool.fetch("SELECT attempts, leased_until FROM outbox")
    assert len(left) == 3 and all(r["attempts"] == 0 and r["leased_until"] is None for r in left)


async def test_corrupted_tenant_isolated_in_a_dispatch_process(
    pool, runtime, dsn, receiver
) -> None:
    good, good_events = await backlog(pool, runtime, receiver.url, 2)
    async with pool.acquire() as conn:
        bad = await create_tenant(conn, "globex", runtime.secret_box)
    _, bad_events = await backlog(pool, runtime, receiver.url, 2, tenant=bad)
    await corrupt_secret(pool, bad.id)
    proc = await start("dispatch", dispatcher_env(runtime, dsn))
    try:
        await receiver.wait_for(2, timeout=30)
        await wait_drained(pool, timeout=30)
    finally:
        proc.terminate()
        assert await proc.wait() == 0
    assert sorted(r.headers["webhook-id"] for r in receiver.received) == sorted(good_events)
    for r in receiver.received:
        Webhook(v1_secret(good)).verify(r.body, r.headers)
    dead = await pool.fetch("SELECT event_id, last_error FROM dead_letters")
    assert sorted(r["event_id"] for r in dead) == sorted(bad_events)
    assert {r["last_error"] for r in dead} == {UNDECRYPTABLE}


def test_key_is_published_by_replace_where_hard_links_fail(tmp_path, monkeypatch) -> None:
    def no_links(src, dst):
        raise PermissionError("hard links not supported")

    monkeypatch.setattr(os, "link", no_links)
    key = at_rest.load_or_create_master_key(None, tmp_path / "data")
    path = tmp_path / "data" / KEY_FILE
    assert parse_master_key(path.read_text()) == key
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == [KEY_FILE]  # no temp file left


def test_without_hard_links_a_key_published_meanwhile_is_not_overwritten(
    tmp_path, monkeypatch
) -> None:
    theirs = new_key()

    def other_starter_won(src, dst):
        Path(dst).write_text(theirs + "\n")
        raise PermissionError("hard links not supported")

    monkeypatch.setattr(os, "link", other_starter_won)
    key = at_rest.load_or_create_master_key(None, tmp_path)
    assert key == parse_master_key(theirs)
    assert [p.name for p in tmp_path.iterdir()] == [KEY_FILE]


def test_key_is_created_where_directories_cannot_be_fsynced(tmp_path, monkeypatch) -> None:
    real_open, real_fsync, real_close = os.open, os.fsync, os.close
    dir_fds: list[int] = []
    closed: list[int] = []

    def fsync(fd):
        if fd in dir_fds:
            raise OSError("fsync not supported on directories")
        real_fsync(fd)

    def open_(path, flags, *args):
        fd = real_open(path, flags, *args)
        if flags & os.O_DIRECTORY:
            dir_fds.append(fd)
        return fd

    def close(fd):
        closed.append(fd)
        real_close(fd)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "close", close)
    key = at_rest.load_or_create_master_key(None, tmp_path / "a")
    assert dir_fds and set(dir_fds) <= set(closed)  # the directory fd is not leaked
    monkeypatch.undo()
    assert parse_master_key((tmp_path / "a" / KEY_FILE).read_text()) == key


def test_key_is_created_where_directories_cannot_be_opened(tmp_path, monkeypatch) -> None:
    real_open, o_directory = os.open, os.O_DIRECTORY

    def open_(path, flags, *args):
        if flags & o_directory:
            raise PermissionError("directory not readable")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", open_)
    key = at_rest.load_or_create_master_key(None, tmp_path)
    assert parse_master_key((tmp_path / KEY_FILE).read_text()) == key


def test_key_is_created_on_a_platform_without_o_directory(tmp_path, monkeypatch) -> None:
    real_open = os.open
    opened: list[str] = []

    def open_(path, flags, *args):
        opened.append(str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.delattr(os, "O_DIRECTORY")
    key = at_rest.load_or_create_master_key(None, tmp_path)
    assert parse_master_key((tmp_path / KEY_FILE).read_text()) == key
    assert str(tmp_path) not in opened  # only the temp key file was opened


async def test_rotate_refuses_a_bad_or_unchanged_new_key(runtime, dsn) -> None:
    env = cli_env(runtime, dsn)
    code, _, err = await run_cli("master-key", "rotate", env={**env, NEW_KEY_VAR: "short"})
    assert code == 2 and err.count("\n") == 1 and f"{NEW_KEY_VAR}: " in err, err
    current = runtime.settings.master_key
    assert current
    code, _, err = await run_cli("master-key", "rotate", env={**env, NEW_KEY_VAR: current})
    assert code == 2 and f"is the current key ({runtime.secret_box.key_id})" in err, err
    assert current not in err


async def test_rotate_replaces_the_key_file_when_the_key_lives_in_the_data_dir(
    pool, runtime, dsn, tmp_path
) -> None:
    key_file = tmp_path / KEY_FILE
    key_file.write_text(f"{runtime.settings.master_key}\n")
    key_file.chmod(0o600)
    new = new_key()
    env = {**cli_env(runtime, dsn), "HOOKRELAY_MASTER_KEY": "", "HOOKRELAY_DATA_DIR": str(tmp_path)}
    code, out, err = await run_cli("master-key", "rotate", env={**env, NEW_KEY_VAR: new})
    assert code == 0, err
    assert f"{key_file} now holds the new key" in out
    assert key_file.read_text() == f"{new}\n" and key_file.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    async with pool.acquire() as conn:
        assert await recorded_key_id(conn) == key_id(parse_master_key(new))
