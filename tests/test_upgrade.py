"""A rolling upgrade from the previous release, and back: ``python -m bench upgrade``, short.

The previous release (tests.harness.releases.PREVIOUS) is installed from this repository's
history into a venv once per session (a git worktree and pip, about half a minute),
then runs beside this tree on one database: migrate, this release's processes
start, the previous ones get SIGTERM, and (``--rollback``) the previous release
starts again on the migrated schema while this one's leave. Tasks flow through
every API all along, with SSE streams and long polls on each.

The benchmark's target is 1 s from a completion to every stream and long poll; on a
shared CI machine this test allows 5 s. The faults it guards against are far
longer: an old API's streams silent until it is stopped, a long poll answered only
when its 20 s wait ran out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hookrelay.outbox.store.migrations import migrations
from hookrelay.service.api.release import release
from tests.harness.procs import ROOT
from tests.harness.releases import PREVIOUS, BuildError, previous_release

pytestmark = pytest.mark.slow
LATE_S = 5.0


@pytest.fixture(scope="session")
def release_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the previous release's venv is built, once per session."""
    cache = tmp_path_factory.mktemp("releases")
    try:
        previous_release(PREVIOUS, cache)
    except (BuildError, OSError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must build the previous release ({PREVIOUS}): {exc}")
        pytest.skip(f"cannot build the previous release {PREVIOUS}: {exc}")
    return cache


def test_rolling_upgrade_and_rollback_lose_nothing_and_stall_nothing(
    release_cache: Path, server_dsn: str, tmp_path: Path
) -> None:
    out = tmp_path / "figures.json"
    argv = [sys.executable, "-m", "bench", "upgrade", "--rate", "20", "--phase-s", "3"]
    argv += ["--rollback", "--cache", str(release_cache), "--json", str(out)]
    run = subprocess.run(
        argv,
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": server_dsn},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    f = json.loads(out.read_text())
    report = run.stdout[-3000:]
    old, new = f["from"].split()[0], release()
    assert f["to"].startswith(new) and old != new
    # What the upgrade migrated is what lets the previous release run beside this one.
    assert set(f["migrations"]) <= {m.label for m in migrations() if m.compatible}
    assert [p["phase"].split(",")[0] for p in f["phases"]] == [
        f"{old} only",
        f"migrated by {new}",
        f"{old} + {new}",
        f"{new} only",
        f"rollback: {new} + {old}",
        "rolled back",
    ]
    # Work went through both releases, and every phase delivered.
    assert all(r["2xx"] > 20 for r in f["by_release"].values()), report
    assert all(p["receipts"] > 0 for p in f["phases"]), report
    assert f["completed"] > 100 and f["delivered"] == f["events"] == f["completed"], report
    assert f["lost"] == 0 and f["duplicates"] == 0, report
    assert f["non_2xx"] == 0 and f["failed"] == 0, report
    assert all(code == 0 for code in f["exits"].values()), f["exits"]
    # Every stream saw every completion, on both releases, and every long poll answered.
    assert f["sse_missed"] == 0 and f["long_poll_missed"] == 0, report
    assert f["long_polls"] > 20 and f["sse_reconnects"] >= 2 * 2, report
    for r in f["by_release"].values():
        assert r["sse_worst_s"] < LATE_S and r["long_poll_worst_s"] < LATE_S, report
