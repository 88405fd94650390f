"""hookrelay as real processes for tests: the environment, start-up, and the wait for a port."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time

from service.runtime import Runtime

from .conftest import ADMIN_TOKEN, ROOT


def dispatcher_env(runtime: Runtime, dsn: str, **overrides: str) -> dict[str, str]:
    """Fast retries and short leases, loopback allowed; ``overrides`` are HOOKRELAY_* names."""
    s = runtime.settings
    return {
        **os.environ,
        "DATABASE_URL": dsn,
        "HOOKRELAY_DATA_DIR": str(s.data_dir),
        "HOOKRELAY_ADMIN_TOKEN": ADMIN_TOKEN,
        "HOOKRELAY_MASTER_KEY": s.master_key,
        "HOOKRELAY_ALLOW_PRIVATE_CIDRS": "127.0.0.0/8",
        "HOOKRELAY_ALLOW_HTTP": "true",
        "HOOKRELAY_LEASE_S": "2",
        "HOOKRELAY_HTTP_TIMEOUT_S": "1",
        "HOOKRELAY_RETRY_BASE_S": "0.05",
        "HOOKRELAY_RETRY_CAP_S": "0.2",
        "HOOKRELAY_POLL_INTERVAL_S": "0.1",
        "HOOKRELAY_BATCH_SIZE": "50",
        "HOOKRELAY_PER_HOST_CONCURRENCY": "50",
        "HOOKRELAY_LOG_LEVEL": "WARNING",
        **{f"HOOKRELAY_{k.upper()}": v for k, v in overrides.items()},
    }


async def start(command: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    """``hookrelay <command>`` as a child process (stderr piped, for its logs)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service.cli",
        command,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


async def start_dispatcher(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await start("dispatch", env)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_for_port(port: int, proc: asyncio.subprocess.Process, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            err = await proc.stderr.read() if proc.stderr else b""
            raise AssertionError(f"process exited {proc.returncode}: {err.decode()[-2000:]}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"nothing listening on {port}")
