"""The container set-up, checked as files (no Docker daemon is needed to run these)."""

from __future__ import annotations

import re

import pytest

from tests.support import ROOT

yaml = pytest.importorskip("yaml")


def test_dockerignore_keeps_local_state_out_of_the_build_context() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in (".venv", ".hookrelay", ".hookrelay-*", ".git", "tests"):
        assert path in ignored


def test_image_is_runtime_only_non_root_and_checks_readiness() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"pip install --no-cache-dir \./client \. ", dockerfile), "runtime only"
    assert "[test]" not in dockerfile and "[dev]" not in dockerfile
    user = re.search(r"^USER (\S+)$", dockerfile, re.M)
    assert user and user.group(1) not in {"root", "0"}
    assert dockerfile.index("USER ") < dockerfile.index("ENTRYPOINT")
    health = re.search(r"^HEALTHCHECK (?:.*\\\n)*.*", dockerfile, re.M)
    assert health and "/readyz" in health.group(0) and "HOOKRELAY_PORT" in health.group(0)


def test_compose_has_the_embedded_default_and_a_postgres_profile() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert "profiles" not in services["hookrelay"], "the embedded set-up is the default"
    assert services["hookrelay"]["command"] == ["serve"]
    stack = {name: s for name, s in services.items() if s.get("profiles") == ["postgres"]}
    assert set(stack) == {"postgres", "api", "dispatch-1", "dispatch-2"}
    assert stack["api"]["command"] == ["api"]
    envs = [stack[n]["environment"] for n in ("api", "dispatch-1", "dispatch-2")]
    assert all(e == envs[0] for e in envs), "every process gets the same settings"
    assert "HOOKRELAY_MASTER_KEY" in envs[0] and "@postgres:" in envs[0]["DATABASE_URL"]
    for name in ("dispatch-1", "dispatch-2"):
        assert stack[name]["command"] == ["dispatch"]
        # A dispatcher's /readyz is on its metrics port, not the API's.
        check = " ".join(stack[name]["healthcheck"]["test"])
        assert "/readyz" in check and "HOOKRELAY_METRICS_PORT" in check and "9464" in check


def test_readme_runs_the_service_without_test_extras() -> None:
    readme = (ROOT / "README.md").read_text()
    run = next(line for line in readme.splitlines() if line.endswith("hookrelay serve"))
    assert "pip install" in run and "[test]" not in run and "[dev]" not in run
