"""hookrelay and its helpers as child processes: ports, the environment, the command line.

Shared by the benchmarks and by the tests that run hookrelay as a real process, so both
start it the same way. Everything here is synchronous; the tests wrap it for asyncio.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/harness/procs.py
# `api` and `serve` with several workers: how long after the port first answers until
# every worker has started (they start together; this is plenty on 2 busy cores).
WORKERS_UP_S = 2.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def master_key() -> str:
    """A fresh ``HOOKRELAY_MASTER_KEY`` (32 random bytes, urlsafe base64)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def hookrelay(command: str, *args: str) -> list[str]:
    """The argv of ``hookrelay <command>`` run from this checkout, with this interpreter."""
    return [sys.executable, "-m", "hookrelay.service.cli", command, *args]


def service_env(
    dsn: str, key: str, *, admin_token: str = "bench", **extra: object
) -> dict[str, str]:
    """The environment a hookrelay child runs with: loopback callbacks allowed, quiet logs,
    and no metrics port for ``dispatch`` (several run on one host; ``metrics_port=N``
    gives one).

    ``extra`` are settings by their lower-case name (``lease_s=2`` sets HOOKRELAY_LEASE_S).
    """
    env = {
        **os.environ,
        "DATABASE_URL": dsn,
        "HOOKRELAY_MASTER_KEY": key,
        "HOOKRELAY_ADMIN_TOKEN": admin_token,
        "HOOKRELAY_ALLOW_HTTP": "true",
        "HOOKRELAY_ALLOW_PRIVATE_CIDRS": "127.0.0.0/8",
        "HOOKRELAY_LOG_LEVEL": "WARNING",
        "HOOKRELAY_METRICS_PORT": "off",
    }
    env.update({f"HOOKRELAY_{k.upper()}": str(v) for k, v in extra.items()})
    return env


# What coverage's subprocess patch (pyproject.toml, [tool.coverage.run]) passes to every
# Python child so that it measures itself.
COVERAGE_VARIABLES = ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")


def uncovered(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) for a child that runs none of hookrelay's code
    (schemathesis, pip): measuring it would only slow it down, several times over."""
    env = dict(os.environ if env is None else env)
    for name in COVERAGE_VARIABLES:
        env.pop(name, None)
    return env


def wait_for_port(
    port: int,
    proc: subprocess.Popen[bytes] | None = None,
    timeout: float = 30.0,
    *,
    host: str = "127.0.0.1",
) -> None:
    """Return once something accepts on ``host:port``; fail early if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on port {port}")


def peak_rss_mb(pid: int) -> float:
    """The process's high-water resident set (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class ToolProcess:
    """A server program a test runs beside hookrelay (a proxy, a pooler): the process,
    the folder it was given and its log, which :meth:`stop` removes with it."""

    _proc: subprocess.Popen[bytes]
    _dir: Path
    log: Path

    def logged(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)
