"""The docs site's reference pages hold what the code holds, and its generated parts
cover everything.

- docs/reference/settings.md lists every variable the service reads, and no other.
- docs/reference/errors.md lists every error code the service sends, and no other.
- docs/reference/cli.md's table has a row for every command of ``hookrelay``.
- scripts/docs_hooks.py (run by ``mkdocs build``) renders every operation of
  ``/openapi.json`` and every command's ``--help``.

The site itself is built by ``scripts/check static`` (``mkdocs build --strict``).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from types import ModuleType
from typing import Any

from hookrelay.service.api import errors
from hookrelay.service.api.openapi import spec
from hookrelay.service.cli import _parser
from hookrelay.service.server.settings import Settings
from tests.support import ROOT

REFERENCE = ROOT / "docs" / "reference"
SOURCES = [*(ROOT / "service").rglob("*.py"), *(ROOT / "outbox").rglob("*.py")]


def first_column(text: str) -> list[str]:
    """The backquoted names in the first column of every Markdown table row of ``text``."""
    return [
        name
        for row in re.findall(r"^\| ((?:[^|\\]|\\.)+) \|", text, flags=re.M)
        for name in re.findall(r"`([^`]+)`", row)
    ]


class Asked(dict[str, str]):
    """An empty environment that remembers every variable it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def get(self, key: str, default: Any = None) -> Any:
        self.names.append(key)
        return default


def read_by_the_service() -> set[str]:
    env = Asked()
    Settings.from_env(env)
    quoted = {
        name
        for path in SOURCES
        for name in re.findall(r"\"(HOOKRELAY_[A-Z0-9_]+)\"", path.read_text())
    }
    return set(env.names) | quoted


def test_settings_page_lists_every_setting_and_no_other() -> None:
    service_part = (REFERENCE / "settings.md").read_text().split("## For the tests")[0]
    listed = set(first_column(service_part))
    read = read_by_the_service()
    assert {"DATABASE_URL", "HOOKRELAY_PORT", "HOOKRELAY_NEW_MASTER_KEY"} <= read
    assert read - listed == set(), "settings the page does not list"
    assert listed - read == set(), "the page lists settings nothing reads"


def sent_codes() -> set[str]:
    """Every error code the service sends: the error classes, the outbox errors' table,
    and the codes written at the places that raise or answer."""

    def subclasses(cls: type[errors.ApiError]) -> list[type[errors.ApiError]]:
        below: list[type[errors.ApiError]] = cls.__subclasses__()
        return [cls, *(s for sub in below for s in subclasses(sub))]

    import hookrelay.service.live.hub  # noqa: F401 - defines an ApiError of its own

    codes = {cls.code for cls in subclasses(errors.ApiError)}
    codes |= {answer.code for answer in errors.OUTBOX_ANSWERS.values()}
    patterns = [
        r"\bcode=\"([a-z_]+)\"",  # raise Unprocessable(..., code="...")
        r"\b[1-5]\d\d,\s*\"([a-z_]+)\"",  # answer(503, "..."), Answer(409, "..."), (400, "...")
        r"\b[1-5]\d\d:\s*\"([a-z_]+)\"",  # {404: "not_found", ...}
        r"\"code\":\s*\"([a-z_]+)\"",  # {"code": "history_expired", ...}
        r"msg\.error\(\s*\"([a-z_]+)\"",  # WebSocket error messages
        r"Reset\(\"([a-z_]+)\"",  # stream resets
    ]
    for path in SOURCES:
        text = path.read_text()
        for pattern in patterns:
            codes |= set(re.findall(pattern, text))
    return codes | {"http_error"}


def test_errors_page_lists_every_code_and_no_other() -> None:
    page = (REFERENCE / "errors.md").read_text()
    listed = set(re.findall(r"^\| (?:[1-5]\d\d|any) \| `([a-z_]+)` \|", page, flags=re.M))
    listed |= set(re.findall(r"`([a-z_]+)`", "\n".join(re.findall(r"^\| `.*", page, re.M))))
    listed |= {"timed_out", "heartbeat_timeout"} & set(re.findall(r"`([a-z_]+)`", page))
    sent = sent_codes()
    assert {"invalid_transition", "too_many_connections", "too_many_streams"} <= sent
    assert sent - listed == set(), "codes the page does not list"
    http = set(re.findall(r"^\| (?:[1-5]\d\d|any) \| `([a-z_]+)` \|", page, flags=re.M))
    assert http - sent == set(), "the page lists codes nothing sends"


def commands(parser: argparse.ArgumentParser) -> set[str]:
    """Every command that runs something: ``hookrelay tenants create``, not ``tenants``."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {parser.prog}
    return {name for sub in subs for p in sub.choices.values() for name in commands(p)}


def test_cli_page_has_a_row_for_every_command() -> None:
    rows = first_column((REFERENCE / "cli.md").read_text())
    listed = set()
    for row in rows:
        words = []
        for word in row.split():
            if not re.fullmatch(r"[a-z][a-z\\|-]*", word):
                break
            words.append(word.split("\\|"))
        stem, last = " ".join(w[0] for w in words[:-1]), words[-1]
        listed |= {f"{stem} {w}".strip() for w in last}
    assert commands(_parser()) == {c for c in listed if c.startswith("hookrelay ")}


def hooks() -> ModuleType:
    found = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts/docs_hooks.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def test_the_generated_parts_cover_every_route_and_command() -> None:
    module = hooks()
    operations = module.operations(spec())
    for path, item in spec()["paths"].items():
        for method in item:
            assert f"### `{method.upper()} {path}`" in operations
    help_text = module.help_pages()
    for name in commands(_parser()) | {"hookrelay", "hookrelay tenants"}:
        assert f"### `{name}`" in help_text
        assert f"usage: {name}" in help_text
    # The pages carry the markers the hooks fill in.
    assert module.OPERATIONS in (REFERENCE / "http-api.md").read_text()
    assert module.HELP in (REFERENCE / "cli.md").read_text()


def test_every_page_is_in_the_nav_and_every_picture_is_shown() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    docs = ROOT / "docs"
    for page in docs.rglob("*.md"):
        assert f": {page.relative_to(docs)}\n" in config, page
    shown = "".join(
        (docs / page).read_text() for page in ("operations/console.md", "guides/portal.md")
    )
    for picture in docs.glob("*.png"):
        assert f"](../{picture.name})" in shown, picture
