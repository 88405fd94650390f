"""Settings from the environment: defaults, parsing, one clear error for bad values."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from hookrelay.service.server import settings
from hookrelay.service.server.settings import Settings, SettingsError
from tests.support import ROOT

pytestmark = pytest.mark.processes


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


def test_a_listen_url_beside_a_transaction_pooler() -> None:
    """HOOKRELAY_LISTEN_DATABASE_URL set apart from DATABASE_URL says DATABASE_URL goes
    through a transaction pooler: prepared statements off unless said on."""
    pooled, direct = "postgresql://u:pw@bouncer:6432/x", "postgresql://u:hunter2@db:5432/x"

    def choice(**env: str) -> bool | None:
        return Settings.from_env({"DATABASE_URL": pooled, **env}).prepared_statements_choice()

    assert choice() is None  # auto: the pools ask the server
    assert choice(HOOKRELAY_LISTEN_DATABASE_URL=direct) is False
    assert choice(HOOKRELAY_LISTEN_DATABASE_URL=pooled) is None  # the same place says nothing
    assert choice(HOOKRELAY_LISTEN_DATABASE_URL=direct, HOOKRELAY_PREPARED_STATEMENTS="on")
    assert choice(HOOKRELAY_PREPARED_STATEMENTS="OFF") is False
    s = Settings.from_env({"DATABASE_URL": pooled, "HOOKRELAY_LISTEN_DATABASE_URL": direct})
    assert "hunter2" not in repr(s)
    with pytest.raises(SettingsError, match="HOOKRELAY_LISTEN_DATABASE_URL") as info:
        Settings.from_env({"DATABASE_URL": pooled, "HOOKRELAY_LISTEN_DATABASE_URL": "db:5432"})
    with pytest.raises(SettingsError, match="DATABASE_URL is not"):
        Settings.from_env({"HOOKRELAY_LISTEN_DATABASE_URL": direct})
    assert "hunter2" not in str(info.value)


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


def test_the_docs_table_is_generated_from_the_declarations() -> None:
    """docs/reference/settings.md holds the table the declarations make; regenerate it with
    ``python -m hookrelay.service.server.settings --write docs/reference/settings.md``."""
    text = (ROOT / "docs" / "reference" / "settings.md").read_text()
    assert settings.with_table(text) == text, "docs/reference/settings.md is out of date"
    for d in settings.declarations():
        assert f"| `{d.var}` |" in text


def test_each_setting_is_declared_once_with_a_meaning() -> None:
    found = settings.declarations()
    names = [d.var for d in found]
    assert len(names) == len(set(names)) == len(fields(Settings))
    assert all(n == "DATABASE_URL" or n.startswith("HOOKRELAY_") for n in names)
    assert all(d.meaning for d in found)
    # Every variable is read under its declared name.
    everything = {d.var: "" for d in found}
    assert Settings.from_env(everything) == Settings()


def test_every_default_of_the_contract() -> None:
    s = Settings.from_env({})
    assert (s.host, s.port, s.tenant_concurrency, s.log_level) == ("127.0.0.1", 8000, 50, "INFO")
    assert s.metrics_token is None and s.admin_token is None and s.master_key is None
    shown = {d.var: d.shown_default() for d in settings.declarations()}
    assert shown["DATABASE_URL"] == "unset: an embedded PostgreSQL"
    assert shown["HOOKRELAY_DATA_DIR"] == "`./.hookrelay`"
    assert shown["HOOKRELAY_RETRY_CAP_S"] == "21600" and shown["HOOKRELAY_POLL_INTERVAL_S"] == "0.5"
    assert (shown["HOOKRELAY_METRICS_PORT"], shown["HOOKRELAY_MIGRATE"]) == ("9464", "`auto`")
    assert Settings.from_env({"HOOKRELAY_MIGRATE": "OFF"}).migrate == "off"


@pytest.mark.parametrize(
    ("var", "raw", "expected"),
    [
        ("HOOKRELAY_PORT", "70000", "<= 65535"),
        ("HOOKRELAY_PORT", "0", ">= 1"),
        ("HOOKRELAY_SECRET_OVERLAP_S", "-1", ">= 0"),
        ("HOOKRELAY_BATCH_SIZE", "1.5", "Expected `int`"),
        ("HOOKRELAY_LEASE_S", "0", "> 0"),
        ("HOOKRELAY_LOG_LEVEL", "chatty", "Invalid enum value"),
    ],
)
def test_bounds_come_from_the_declarations(var: str, raw: str, expected: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({var: raw})
    assert f"{var}={raw!r}" in str(info.value) and expected in str(info.value)


def test_values_are_read_as_declared() -> None:
    s = Settings.from_env(
        {"HOOKRELAY_LOG_LEVEL": "debug", "HOOKRELAY_SECRET_OVERLAP_S": "0", "HOOKRELAY_PORT": "1"}
    )
    assert (s.log_level, s.secret_overlap_s, s.port) == ("DEBUG", 0.0, 1)
    assert Settings.from_env({"HOOKRELAY_ALLOW_HTTP": "on"}).allow_http is True


def test_metrics_port_of_dispatch_has_a_default_and_can_be_off() -> None:
    assert Settings.from_env({}).metrics_port == 9464
    assert Settings.from_env({"HOOKRELAY_METRICS_PORT": "9465"}).metrics_port == 9465
    for off in ("off", "OFF", "0"):
        assert Settings.from_env({"HOOKRELAY_METRICS_PORT": off}).metrics_port is None
    for bad in ("on", "-1", "65536", "9464.5"):
        with pytest.raises(SettingsError, match="HOOKRELAY_METRICS_PORT") as info:
            Settings.from_env({"HOOKRELAY_METRICS_PORT": bad})
        assert "or off" in str(info.value)


def test_egress_proxy_and_tls_files_are_checked_at_start(tmp_path: Path) -> None:
    s = Settings.from_env({"HOOKRELAY_EGRESS_PROXY": "http://proxy.internal:3128"})
    proxy = s.egress_proxy_config()
    assert proxy is not None and (proxy.host, proxy.port) == ("proxy.internal", 3128)
    assert Settings.from_env({}).egress_proxy_config() is None
    assert Settings.from_env({}).tls_context() is None
    with pytest.raises(SettingsError) as info:
        Settings.from_env(
            {
                "HOOKRELAY_EGRESS_PROXY": "socks5://proxy:1080",
                "HOOKRELAY_CA_BUNDLE": str(tmp_path / "missing.pem"),
            }
        )
    msg = str(info.value)
    assert "HOOKRELAY_EGRESS_PROXY='socks5://proxy:1080'" in msg
    assert "HOOKRELAY_CA_BUNDLE=" in msg and "cannot read it" in msg


def test_the_table_can_be_printed_by_running_the_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hookrelay.service.server.settings", "--markdown"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == settings.markdown_table()


def test_write_replaces_only_the_table_between_its_markers(tmp_path: Path) -> None:
    page = tmp_path / "settings.md"
    page.write_text(f"# Settings\n{settings.TABLE_BEGIN}\nstale\n{settings.TABLE_END}\nafter\n")
    assert settings.main(["--write", str(page)]) == 0
    text = page.read_text()
    assert "stale" not in text and text.startswith("# Settings\n") and text.endswith("after\n")
    assert settings.markdown_table() in text


def test_a_boolean_setting_refuses_other_words() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"HOOKRELAY_ALLOW_HTTP": "perhaps"})
    assert "HOOKRELAY_ALLOW_HTTP='perhaps'" in str(info.value)
    assert "expected true or false" in str(info.value)
    assert Settings.from_env({"HOOKRELAY_ALLOW_HTTP": "no"}).allow_http is False


def test_the_table_describes_an_unbounded_number_by_its_unit_alone() -> None:
    hint = Annotated[float, settings.doc("a pause")]
    info = msgspec.inspect.type_info(hint)
    assert isinstance(info, msgspec.inspect.Metadata)
    unbounded = settings.Declaration("pause_s", "HOOKRELAY_PAUSE_S", hint, 1.5, info)
    assert (unbounded.values(), unbounded.shown_default()) == ("seconds", "1.5")
