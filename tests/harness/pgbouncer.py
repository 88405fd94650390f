"""Debian's PgBouncer as a child process, in transaction mode, in front of a PostgreSQL.

Used by the tests (``tests/test_pgbouncer.py``) and by ``bench pgbouncer``. Its
configuration is what docs/operations/deploy.md shows: ``pool_mode = transaction``,
fewer server connections than clients (so transactions of one client really do land
on different server connections), and the server's own authentication (trust on the
tests' loopback server) passed through.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import SplitResult, parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from tests.harness.procs import ToolProcess, free_port, wait_for_port

CONFIG = """\
[databases]
* = host={host} port={port}{password}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {auth_file}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 1000
max_db_connections = {pool_size}
server_lifetime = 3600
"""


class PgBouncer(ToolProcess):
    """``pgbouncer`` on a free loopback port in front of ``dsn``'s server until :meth:`stop`.

    PgBouncer refuses to run as root: as root it is started with ``-u`` (:func:`_run_as`).
    """

    def __init__(self, binary: str, dsn: str, *, pool_size: int = 4) -> None:
        self.server = urlsplit(dsn)
        host, port = _server_address(self.server)
        self.port = free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="hookrelay-pgbouncer-"))
        self._dir.chmod(0o755)  # readable by the unprivileged user it may switch to
        user = unquote(self.server.username or "postgres")
        password = unquote(self.server.password or "")
        auth_file = self._dir / "users.txt"
        auth_file.write_text(f'"{user}" ""\n')
        config = self._dir / "pgbouncer.ini"
        config.write_text(
            CONFIG.format(
                host=host,
                port=port,
                password=f" password={password}" if password else "",
                listen=self.port,
                auth_file=auth_file,
                pool_size=pool_size,
            )
        )
        for path in (auth_file, config):
            path.chmod(0o644)
        self.log = self._dir / "pgbouncer.log"
        command = [binary, str(config)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", _run_as(host)]
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(self.port, self._proc, timeout=10)
        except BaseException:
            self.stop()
            raise

    def dsn(self, database: str | None = None) -> str:
        """The server's DSN with PgBouncer's address instead (and ``database``, if given)."""
        parts = self.server
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{self.port}" if userinfo else f"127.0.0.1:{self.port}"
        path = f"/{database}" if database is not None else parts.path
        # Without the server's own ?host= (the embedded server's socket directory).
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k not in ("host", "port")])
        return urlunsplit(parts._replace(netloc=netloc, path=path, query=query))

    def cpu_s(self) -> float:
        """User + system CPU seconds PgBouncer (one process) has used so far."""
        fields = Path(f"/proc/{self._proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_address(dsn: SplitResult) -> tuple[str, int]:
    """Where PgBouncer finds the server: host (or the socket's directory) and port."""
    query = dict(parse_qsl(dsn.query))
    host = query.get("host") or dsn.hostname or "127.0.0.1"
    port = int(query.get("port") or dsn.port or 5432)
    if host.startswith("/") and not (query.get("port") or dsn.port):
        sockets = sorted(Path(host).glob(".s.PGSQL.*[0-9]"))
        if sockets:
            port = int(sockets[0].name.rsplit(".", 1)[1])
    return host, port


def _run_as(host: str) -> str:
    """The user PgBouncer switches to when started as root (it refuses to run as root):
    the owner of the server's socket directory, who alone may reach a socket in a
    private directory (the tests' embedded server), else ``nobody``."""
    if host.startswith("/"):
        return pwd.getpwuid(Path(host).stat().st_uid).pw_name
    return "nobody"


def pgbouncer_binary() -> str | None:
    """The pgbouncer on PATH (or Debian's /usr/sbin), if installed."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    candidate = "/usr/sbin/pgbouncer"
    return candidate if Path(candidate).exists() else None
