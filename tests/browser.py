"""What the browser tests share: the Chromium they drive, or a skip (never under CI), and
where their screenshots go."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from tests.harness.procs import ROOT


def chromium() -> str:
    """Debian's Chromium (or ``HOOKRELAY_CHROMIUM``); without it the calling test module
    is skipped, except under CI, where .ci/run installs it and a skip would hide a gap."""
    # Found, not imported: every parallel worker collects these modules, and only the one
    # that runs a module's tests needs playwright loaded (they import it themselves).
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("playwright is not installed", allow_module_level=True)
    found = os.environ.get("HOOKRELAY_CHROMIUM") or next(
        (
            p
            for p in ("/usr/bin/chromium", shutil.which("chromium") or "")
            if p and Path(p).exists()
        ),
        None,
    )
    if found is None:
        if os.environ.get("CI"):
            raise RuntimeError("CI must run the browser tests: install chromium (see .ci/run)")
        pytest.skip("no Chromium found (apt-get install chromium)", allow_module_level=True)
    return found


def screenshots(tmp_path: Path, variable: str) -> Path:
    """Where a browser test's screenshots go: ``$variable`` under the checkout (``docs``
    refreshes the pictures of the docs), else the test's temporary directory."""
    where = os.environ.get(variable)
    path = (ROOT / where) if where else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path
