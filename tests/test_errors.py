"""One table maps outbox errors to HTTP answers; the most specific class wins. Messages
to tenants name the rule that refused, never a setting of the service."""

from __future__ import annotations

import ast
from pathlib import Path

from hookrelay.outbox.errors import (
    AlreadyPending,
    ConfigurationError,
    IdempotencyInFlight,
    InvalidCallbackUrl,
    InvalidTransition,
    NotTerminal,
    OutboxError,
    TaskNotFound,
)
from hookrelay.service.api.errors import answer_for
from tests.support import ROOT


def test_subclasses_get_their_own_answer() -> None:
    base = answer_for(InvalidTransition("task_1", None))
    pending = answer_for(AlreadyPending("task_1", None))
    not_terminal = answer_for(NotTerminal("task_1", None))
    assert base is not None and pending is not None and not_terminal is not None
    assert (base.status, base.code) == (409, "invalid_transition")
    assert (pending.status, pending.code) == (409, "delivery_pending")
    assert (not_terminal.status, not_terminal.code) == (409, "not_terminal")


def test_answers() -> None:
    found = answer_for(TaskNotFound("task_1"))
    assert found is not None and (found.status, found.code) == (404, "not_found")
    busy = answer_for(IdempotencyInFlight("k"))
    assert busy is not None and busy.headers == {"Retry-After": "1"}


def test_errors_no_request_should_meet_have_no_answer() -> None:
    assert answer_for(ConfigurationError("bad key")) is None


def test_every_outbox_error_is_under_the_root() -> None:
    # URL errors stay ValueErrors too, as they were before the tree.
    assert issubclass(InvalidCallbackUrl, OutboxError) and issubclass(
        InvalidCallbackUrl, ValueError
    )


# Where the API's answers, stream resets and socket close reasons are written. The
# OpenAPI document describes the settings' defaults to integrators: no refusal there.
TENANT_FACING = [ROOT / "service" / "api", ROOT / "service" / "live"]
DESCRIBES_SETTINGS = {ROOT / "service" / "api" / "openapi.py"}


def test_no_message_to_a_tenant_names_a_setting() -> None:
    """A refusal says which rule refused; the settings that would loosen it are the
    operator's, named in logs and docs only."""
    found = []
    for path in sorted(p for d in TENANT_FACING for p in d.rglob("*.py")):
        if path in DESCRIBES_SETTINGS:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        logged = {
            id(arg)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "log"
            for arg in ast.walk(node)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and "HOOKRELAY_" in node.value
                and id(node) not in docstrings | logged
            ):
                found.append(f"{Path(path).relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert found == []
