"""Debian's tinyproxy as a child process: a real forward proxy for the egress-proxy path.

Used by the tests (``tests/test_egress_proxy.py``) and by ``bench dispatch_cpu``. Its
configuration allows CONNECT to any port from loopback only, as docs/operations/delivery.md
shows for a proxy of hookrelay's.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.harness.procs import ToolProcess, free_port, wait_for_port

CONFIG = """\
Port {port}
Listen 127.0.0.1
Timeout 30
MaxClients 512
LogLevel Connect
LogFile "{log}"
Allow 127.0.0.1
DisableViaHeader Yes
"""


class Tinyproxy(ToolProcess):
    """``tinyproxy -d`` on a free loopback port until :meth:`stop`."""

    def __init__(self, binary: str) -> None:
        self.port = free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="hookrelay-tinyproxy-"))
        self.log = self._dir / "tinyproxy.log"
        config = self._dir / "tinyproxy.conf"
        config.write_text(CONFIG.format(port=self.port, log=self.log))
        self._proc = subprocess.Popen(
            [binary, "-d", "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(self.port, self._proc, timeout=10)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def tinyproxy_binary() -> str | None:
    """The tinyproxy on PATH (or Debian's /usr/bin, /usr/sbin), if installed."""
    found = shutil.which("tinyproxy")
    if found:
        return found
    for candidate in ("/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"):
        if Path(candidate).exists():
            return candidate
    return None
