"""The hookrelay package needs only httpx, tenacity and cryptography; its task model.

A partner installs it to talk to a remote server; a receiver to verify webhooks. A
child interpreter whose import system refuses every third-party package but those
(and what they themselves import) imports the client and the receiver, and uses them.
The framework adapters need their framework, and only theirs.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap

import pytest

from hookrelay.models import Task
from tests.clientfakes import task_json
from tests.support import ROOT

GUARD = textwrap.dedent(
    """
    import sys

    ALLOWED = {
        "hookrelay", "httpx", "httpcore", "h11", "anyio", "sniffio", "idna", "certifi",
        "tenacity", "cryptography", "cffi", "_cffi_backend", "typing_extensions",
    }
    ALLOWED |= set(sys.stdlib_module_names)

    class OnlyThese:
        def find_spec(self, name, path=None, target=None):
            if "*" not in EXTRA and name.partition(".")[0] not in ALLOWED | EXTRA:
                raise ModuleNotFoundError(f"{name} is not allowed here", name=name)
            return None

    sys.meta_path.insert(0, OnlyThese())
    """
)

USE = textwrap.dedent(
    """
    import httpx
    from hookrelay.client import Client, NotFound
    from hookrelay.receiver import MemorySeen, verify
    from hookrelay.receiver.postgres import DDL, AsyncpgSeen

    def answer(request):
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "m"}})

    with Client("http://h.test", "k", transport=httpx.MockTransport(answer)) as c:
        try:
            c.get("task_a")
        except NotFound:
            print("client ok")
    assert "CREATE TABLE" in DDL and MemorySeen().add("evt_1")
    try:
        import starlette  # noqa: F401
    except ImportError:
        print("guarded")
    """
)


def run(extra: set[str], code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a child interpreter allowed only those packages and ``extra`` ("*": any)."""
    script = f"EXTRA = {extra!r}\nFRAMEWORKS = {{'starlette', 'flask', 'django', 'fastapi'}}\n"
    script += GUARD + code
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_client_and_receiver_need_only_httpx_tenacity_cryptography() -> None:
    done = run(set(), USE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["client", "ok", "guarded"]


def test_each_adapter_needs_its_framework_and_no_other() -> None:
    frameworks = {"starlette", "flask", "django", "fastapi"}
    for module in ("starlette", "flask", "django"):
        code = f"import hookrelay.receiver.{module}\n"
        refused = run(set(), code)
        assert refused.returncode != 0 and f"{module} is not allowed" in refused.stderr
        # With every framework installed, importing one adapter loads only its own.
        done = run(frameworks | {"*"}, code + "print(sorted(FRAMEWORKS & set(sys.modules)))")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [f"['{module}']"], module


def test_the_task_resource_parses_into_frozen_dataclasses() -> None:
    progress = {"percent": 40, "message": "m", "updatedAt": "2026-01-01T00:00:03Z"}
    task = Task.from_json(task_json("running", 3, progress=progress, extra="ignored"))
    assert task.is_progress and not task.terminal and task.progress is not None
    assert task.delivery is not None and task.delivery.status == "none"
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.status = "failed"  # type: ignore[misc]
    with pytest.raises(ValueError, match="required time"):
        Task.from_json({**task_json(), "createdAt": None})
