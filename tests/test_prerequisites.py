"""What a process needs before it serves: the data directory, the admin token, the master key."""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest

from hookrelay.outbox.errors import ConfigurationError
from hookrelay.service.server.prerequisites import ADMIN_TOKEN_FILE, open_dsn, prepare
from hookrelay.service.server.settings import Settings

pytestmark = pytest.mark.processes

KEY = base64.b64encode(bytes(range(32))).decode()


def test_runtime_repr_never_shows_the_token_or_the_dsn(tmp_path) -> None:
    dsn = "postgresql://app:hunter2@db.example/app"
    runtime = prepare(Settings(database_url=dsn, master_key=KEY, data_dir=tmp_path))
    assert runtime.admin_token_created
    assert runtime.admin_token not in repr(runtime)
    assert "hunter2" not in repr(runtime)
    assert repr(runtime).startswith("Runtime(embedded=False, ")


def test_listen_and_migrate_on_the_listen_url_when_there_is_one(tmp_path) -> None:
    pooled, direct = "postgresql://app@bouncer:6432/app", "postgresql://app@db:5432/app"
    plain = prepare(Settings(database_url=pooled, master_key=KEY, data_dir=tmp_path))
    assert (plain.listen_dsn, plain.prepared_statements) == (pooled, None)
    beside = prepare(
        Settings(database_url=pooled, listen_database_url=direct, master_key=KEY, data_dir=tmp_path)
    )
    assert (beside.dsn, beside.listen_dsn, beside.prepared_statements) == (pooled, direct, False)
    # The embedded server is ours, reached directly: nothing to ask.
    assert replace(plain, embedded=True).prepared_statements is True


def test_an_existing_admin_token_file_is_kept(tmp_path) -> None:
    (tmp_path / ADMIN_TOKEN_FILE).write_text("hra_kept\n")
    runtime = prepare(
        Settings(database_url="postgresql://x@h/d", master_key=KEY, data_dir=tmp_path)
    )
    assert (runtime.admin_token, runtime.admin_token_created) == ("hra_kept", False)
    assert runtime.admin_token_source() == str(tmp_path / ADMIN_TOKEN_FILE)


def test_a_data_dir_without_an_embedded_database_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigurationError, match="no embedded database in .*pg"):
        open_dsn(Settings(data_dir=tmp_path), may_create=False)
    assert not (tmp_path / "pg").exists()


def test_a_bad_master_key_is_refused_without_echoing_it(tmp_path) -> None:
    settings = Settings(
        database_url="postgresql://x@h/d", master_key="not-a-key", data_dir=tmp_path
    )
    with pytest.raises(ConfigurationError, match="exactly 32 bytes") as info:
        prepare(settings, needs_token=False)
    assert "not-a-key" not in str(info.value)
