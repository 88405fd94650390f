"""The previous release of hookrelay, installed from this repository's history.

:func:`previous_release` makes a git worktree of a commit, installs it with pip into a
venv of its own (only the registry pip, or uv, is configured with is reached) and removes the
worktree again; the venv is cached. ``python -m bench upgrade`` runs it beside this
tree, and tests/test_upgrade.py runs that benchmark in short.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.harness.procs import ROOT

# The previous landed release (it reports 0.1.0): where an upgrade starts from by
# default. At each release, point it at the release before (CONTRIBUTING.md).
PREVIOUS = "a62dbb1"


class BuildError(RuntimeError):
    """The previous release could not be installed (the message says which step failed)."""


def run(argv: list[str], what: str, **kwargs: Any) -> str:
    """``argv``'s output; :class:`BuildError` naming ``what`` and the output's end if it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise BuildError(f"{what} failed (exit {done.returncode}):\n{tail}")
    out: str = done.stdout
    return out.strip()


def _installer(python: Path) -> list[str]:
    """``pip install`` into ``python``'s venv: uv's, when this interpreter's venv has uv
    (.ci/run installs it; the same registry and versions, several times faster, reusing
    the downloads of that install), else the venv's own pip."""
    uv = Path(sys.executable).parent / "uv"
    if uv.exists():
        return [str(uv), "pip", "install", "--quiet", "--python", str(python)]
    return [str(python), "-m", "pip", "install", "--quiet"]


def previous_release(ref: str = PREVIOUS, cache: Path | None = None) -> Path:
    """The venv holding release ``ref`` of this repository, built once and cached.

    A git worktree of ``ref`` is installed with pip into ``<cache>/releases/<commit>-py3.N/
    venv`` and removed again; concurrent callers wait for one build (a lock file).
    Raises :class:`BuildError` naming the step that failed.
    """
    cache = cache or ROOT / ".hookrelay-bench"
    commit = run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"], "git")
    home = cache / "releases" / f"{commit[:12]}-py{sys.version_info[0]}.{sys.version_info[1]}"
    venv = home / "venv"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / "ready").exists():
            return venv
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir()
        src = Path(tempfile.mkdtemp(prefix="hookrelay-release-")) / commit[:12]
        run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(src), commit], "git")
        try:
            run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
            pip = _installer(venv / "bin" / "python")
            # From 0.2.0 on the client is a distribution of its own, which the server's
            # pins: both from the worktree, never the client from the registry.
            client = src / "client"
            parts = [str(client), str(src)] if (client / "pyproject.toml").exists() else [str(src)]
            run([*pip, *parts], f"pip install of {ref}", cwd=home)
        finally:
            with contextlib.suppress(BuildError):
                run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(src)], "git")
            shutil.rmtree(src.parent, ignore_errors=True)
        (home / "ready").write_text(commit + "\n")
    return venv
