"""What a killed run leaves in the embedded server's files, made harmless before the next start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hookrelay.service.server.embedded_recovery import is_our_postmaster, prune_handles, recover

pytestmark = pytest.mark.processes


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_handles_of_dead_processes_are_dropped(tmp_path: Path) -> None:
    gone = dead_pid()
    (tmp_path / ".handle_pids.json").write_text(json.dumps([gone, os.getpid()]))
    assert prune_handles(tmp_path) == [gone]
    assert json.loads((tmp_path / ".handle_pids.json").read_text()) == [os.getpid()]
    assert prune_handles(tmp_path) == []


def test_postmaster_pid_naming_another_live_program_is_removed(tmp_path: Path) -> None:
    # After a container restart the old server's pid may belong to anything.
    pidfile = tmp_path / "postmaster.pid"
    pidfile.write_text(f"{os.getpid()}\n{tmp_path}\n1764680000\n5432\n{tmp_path}\n\n 0 0\nready\n")
    assert not is_our_postmaster(os.getpid(), tmp_path)
    recover(tmp_path)
    assert not pidfile.exists()


def test_postmaster_pid_of_a_dead_process_is_left_to_postgres(tmp_path: Path) -> None:
    pidfile = tmp_path / "postmaster.pid"
    pidfile.write_text(f"{dead_pid()}\n{tmp_path}\n")
    recover(tmp_path)
    assert pidfile.exists()


def test_nothing_to_recover_in_a_new_directory(tmp_path: Path) -> None:
    recover(tmp_path / "absent")
    assert not (tmp_path / "absent").exists()
