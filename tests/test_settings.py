"""Settings from the environment: defaults, parsing, one clear error for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from hookrelay.service.server.settings import Settings, SettingsError


def test_defaults_match_the_contract() -> None:
    s = Settings.from_env({})
    assert s.database_url is None and s.data_dir == Path(".hookrelay")
    assert (s.retry_base_s, s.retry_cap_s, s.max_attempts) == (5.0, 21600.0, 18)
    assert (s.lease_s, s.http_timeout_s) == (30.0, 15.0)
    assert (s.concurrency, s.per_host_concurrency) == (200, 20)
    assert (s.secret_overlap_s, s.sweep_interval_s) == (86400.0, 1.0)
    assert s.allow_http is False and s.allow_private_cidrs == ""


def test_reads_every_variable() -> None:
    env = {
        "DATABASE_URL": "postgresql://u:pw@db/x",
        "HOOKRELAY_DATA_DIR": "/srv/hr",
        "HOOKRELAY_ADMIN_TOKEN": "tok",
        "HOOKRELAY_ALLOW_PRIVATE_CIDRS": "127.0.0.0/8,::1/128",
        "HOOKRELAY_ALLOW_HTTP": "true",
        "HOOKRELAY_RETRY_BASE_S": "0.5",
        "HOOKRELAY_RETRY_CAP_S": "60",
        "HOOKRELAY_MAX_ATTEMPTS": "4",
        "HOOKRELAY_LEASE_S": "20",
        "HOOKRELAY_HTTP_TIMEOUT_S": "3",
        "HOOKRELAY_CONCURRENCY": "50",
        "HOOKRELAY_PER_HOST_CONCURRENCY": "5",
        "HOOKRELAY_SECRET_OVERLAP_S": "10",
        "HOOKRELAY_SWEEP_INTERVAL_S": "0.25",
    }
    s = Settings.from_env(env)
    assert s.retry_policy().base_s == 0.5 and s.retry_policy().max_attempts == 4
    assert s.allow_http and s.address_policy().allow_http
    assert (s.lease_s, s.http_timeout_s, s.concurrency, s.per_host_concurrency) == (20, 3, 50, 5)
    assert s.sweep_interval_s == 0.25 and s.secret_overlap_s == 10


def test_several_servers_in_database_url() -> None:
    """A failover list, as libpq and asyncpg take it: each port checked on its own."""
    url = "postgresql://u:pw@db-a:5432,db-b:6432/x?target_session_attrs=read-write"
    assert Settings.from_env({"DATABASE_URL": url}).database_url == url
    with pytest.raises(SettingsError, match="DATABASE_URL") as info:
        Settings.from_env({"DATABASE_URL": "postgresql://u:pw@db-a:5432,db-b:port/x"})
    assert "pw" not in str(info.value)


def test_secrets_are_masked() -> None:
    s = Settings.from_env(
        {"DATABASE_URL": "postgresql://u:hunter2@db/x", "HOOKRELAY_ADMIN_TOKEN": "sekrit-token"}
    )
    text = repr(s)
    assert "hunter2" not in text and "sekrit-token" not in text and "***" in text


def test_all_bad_values_reported_at_once() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(
            {
                "HOOKRELAY_RETRY_BASE_S": "soon",
                "HOOKRELAY_MAX_ATTEMPTS": "0",
                "HOOKRELAY_ALLOW_HTTP": "perhaps",
                "HOOKRELAY_ALLOW_PRIVATE_CIDRS": "10.0.0.0/33",
            }
        )
    msg = str(info.value)
    for var in ("HOOKRELAY_RETRY_BASE_S", "HOOKRELAY_MAX_ATTEMPTS", "HOOKRELAY_ALLOW_HTTP"):
        assert var in msg
    assert "10.0.0.0/33" in msg


def test_lease_must_outlast_an_attempt() -> None:
    with pytest.raises(SettingsError, match="HOOKRELAY_LEASE_S"):
        Settings.from_env({"HOOKRELAY_LEASE_S": "10", "HOOKRELAY_HTTP_TIMEOUT_S": "15"})


def test_bad_master_key() -> None:
    with pytest.raises(SettingsError, match="HOOKRELAY_MASTER_KEY"):
        Settings.from_env({"HOOKRELAY_MASTER_KEY": "short"})
